package scm

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/xemahq/xema/internal/connector"
	"github.com/xemahq/xema/internal/fault"
)

// gitea follows the Gitea API v1 (tested against a real Gitea 1.26.0): the base URL is the
// instance root.
type gitea struct{}

// GiteaHeader is the auth header of every Gitea call.
func GiteaHeader(t connector.Target) map[string]string {
	return map[string]string{"Authorization": "token " + t.Token.Reveal()}
}

// GiteaRepoURL is the API v1 URL of the bound repository.
func GiteaRepoURL(t connector.Target, repo connector.Repository) string {
	return connector.Join(t.BaseURL, "/api/v1/repos/"+url.PathEscape(repo.Owner)+"/"+url.PathEscape(repo.Name))
}

func giteaFailure(r *connector.Response) error { return connector.Failure("gitea", r) }

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
		return ChangeRequest{}, connector.ClientFailure(r, fault.Conflict, connector.CodeChangeRequestExists,
			"an open change request for these branches already exists")
	case http.StatusNotFound:
		return ChangeRequest{}, connector.ClientFailure(r, fault.NotFound, connector.CodeBranchNotFound,
			"the source or target branch (or the bound repository) does not exist")
	default:
		return ChangeRequest{}, giteaFailure(r)
	}
	return decodeRecord[pull]("gitea", r)
}

func (gitea) merge(ctx context.Context, t connector.Target, repo connector.Repository, number int, method string) (ChangeRequest, error) {
	pullURL := fmt.Sprintf("%s/pulls/%d", GiteaRepoURL(t, repo), number)
	r, err := connector.Do(ctx, t, "gitea", connector.Request{Method: http.MethodPost, URL: pullURL + "/merge",
		Header: GiteaHeader(t), Body: map[string]string{"Do": method}})
	if err != nil {
		return ChangeRequest{}, err
	}
	if err := mergeRefusal(r, number, "already merged, closed or conflicting", giteaFailure,
		http.StatusMethodNotAllowed, http.StatusConflict); err != nil {
		return ChangeRequest{}, err
	}
	return getPull(ctx, t, "gitea", pullURL, GiteaHeader(t), giteaFailure)
}
