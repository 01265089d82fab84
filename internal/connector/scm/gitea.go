package scm

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/xemahq/xema/internal/connector"
)

// gitea follows the Gitea API v1 (tested against a real Gitea 1.26.0): the base URL is the
// instance root.
type gitea struct{}

func (gitea) name() string { return "gitea" }

// GiteaHeader is the auth header of every Gitea call.
func GiteaHeader(t connector.Target) map[string]string {
	return map[string]string{"Authorization": "token " + t.Token.Reveal()}
}

// GiteaRepoURL is the API v1 URL of the bound repository.
func GiteaRepoURL(t connector.Target, repo connector.Repository) string {
	return connector.Join(t.BaseURL, "/api/v1/repos/"+url.PathEscape(repo.Owner)+"/"+url.PathEscape(repo.Name))
}

type giteaPull struct {
	Number    int    `json:"number"`
	Title     string `json:"title"`
	State     string `json:"state"` // open | closed
	Merged    bool   `json:"merged"`
	CreatedAt string `json:"created_at"`
	UpdatedAt string `json:"updated_at"`
	Head      struct {
		Ref string `json:"ref"`
	} `json:"head"`
	Base struct {
		Ref string `json:"ref"`
	} `json:"base"`
}

func (p giteaPull) record() ChangeRequest {
	status := p.State
	if p.Merged {
		status = StatusMerged
	}
	return ChangeRequest{ExternalID: fmt.Sprint(p.Number), SourceBranch: p.Head.Ref, TargetBranch: p.Base.Ref,
		Title: p.Title, Status: status, CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt}
}

func (gitea) create(ctx context.Context, t connector.Target, repo connector.Repository, in CreateInput) (ChangeRequest, error) {
	r, err := connector.Do(ctx, t, "gitea", connector.Request{Method: http.MethodPost, URL: GiteaRepoURL(t, repo) + "/pulls",
		Header: GiteaHeader(t),
		Body:   map[string]string{"head": in.SourceBranch, "base": in.TargetBranch, "title": in.Title, "body": in.Description}})
	if err != nil {
		return ChangeRequest{}, err
	}
	switch r.Status {
	case http.StatusCreated:
	case http.StatusConflict:
		return ChangeRequest{}, connector.ClientFailure(r, http.StatusConflict, connector.CodeChangeRequestExists,
			"an open change request for these branches already exists")
	case http.StatusNotFound:
		return ChangeRequest{}, connector.ClientFailure(r, http.StatusNotFound, connector.CodeBranchNotFound,
			"the source or target branch (or the bound repository) does not exist")
	default:
		return ChangeRequest{}, connector.Failure("gitea", r)
	}
	var p giteaPull
	if err := r.Decode("gitea", &p); err != nil {
		return ChangeRequest{}, err
	}
	return p.record(), nil
}

func (gitea) merge(ctx context.Context, t connector.Target, repo connector.Repository, number int, method string) (ChangeRequest, error) {
	pull := fmt.Sprintf("%s/pulls/%d", GiteaRepoURL(t, repo), number)
	r, err := connector.Do(ctx, t, "gitea", connector.Request{Method: http.MethodPost, URL: pull + "/merge",
		Header: GiteaHeader(t), Body: map[string]string{"Do": method}})
	if err != nil {
		return ChangeRequest{}, err
	}
	switch r.Status {
	case http.StatusOK:
	case http.StatusNotFound:
		return ChangeRequest{}, connector.ClientFailure(r, http.StatusNotFound, connector.CodeNotFound,
			fmt.Sprintf("no change request %d in the bound repository", number))
	case http.StatusMethodNotAllowed, http.StatusConflict:
		return ChangeRequest{}, connector.ClientFailure(r, http.StatusConflict, connector.CodeNotMergeable,
			fmt.Sprintf("change request %d cannot be merged (already merged, closed or conflicting)", number))
	default:
		return ChangeRequest{}, connector.Failure("gitea", r)
	}
	r, err = connector.Do(ctx, t, "gitea", connector.Request{Method: http.MethodGet, URL: pull, Header: GiteaHeader(t)})
	if err != nil {
		return ChangeRequest{}, err
	}
	if r.Status != http.StatusOK {
		return ChangeRequest{}, connector.Failure("gitea", r)
	}
	var p giteaPull
	if err := r.Decode("gitea", &p); err != nil {
		return ChangeRequest{}, err
	}
	return p.record(), nil
}
