package scm

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/xemahq/xema/internal/connector"
	"github.com/xemahq/xema/internal/fault"
)

// gitlab follows the GitLab REST API v4: the base URL is the instance root
// (https://gitlab.com); the project is addressed by its URL-encoded full path.
type gitlab struct{}

// GitLabHeader is the auth header of every GitLab call.
func GitLabHeader(t connector.Target) map[string]string {
	return map[string]string{"PRIVATE-TOKEN": t.Token.Reveal()}
}

// GitLabProjectURL is the v4 URL of the bound project.
func GitLabProjectURL(t connector.Target, repo connector.Repository) string {
	return connector.Join(t.BaseURL, "/api/v4/projects/"+url.PathEscape(repo.FullName()))
}

type gitlabMR struct {
	IID          int    `json:"iid"`
	Title        string `json:"title"`
	State        string `json:"state"` // opened | closed | merged | locked
	SourceBranch string `json:"source_branch"`
	TargetBranch string `json:"target_branch"`
	CreatedAt    string `json:"created_at"`
	UpdatedAt    string `json:"updated_at"`
}

func (m gitlabMR) record() ChangeRequest {
	status := m.State
	switch m.State {
	case "opened", "locked":
		status = StatusOpen
	}
	return ChangeRequest{ExternalID: fmt.Sprint(m.IID), SourceBranch: m.SourceBranch, TargetBranch: m.TargetBranch,
		Title: m.Title, Status: status, CreatedAt: m.CreatedAt, UpdatedAt: m.UpdatedAt}
}

// gitlabMessage reads GitLab's error body: {"message": "..."} or {"message": ["..."]}.
func gitlabMessage(r *connector.Response) string {
	var body struct {
		Message any `json:"message"`
	}
	_ = r.Decode("gitlab", &body)
	switch m := body.Message.(type) {
	case string:
		return m
	case []any:
		parts := make([]string, 0, len(m))
		for _, p := range m {
			parts = append(parts, fmt.Sprint(p))
		}
		return strings.Join(parts, "; ")
	}
	return ""
}

func gitlabFailure(r *connector.Response) error { return connector.Failure("gitlab", r) }

func (gitlab) create(ctx context.Context, t connector.Target, repo connector.Repository, in CreateInput) (ChangeRequest, error) {
	r, err := connector.Do(ctx, t, "gitlab", connector.Request{Method: http.MethodPost,
		URL: GitLabProjectURL(t, repo) + "/merge_requests", Header: GitLabHeader(t),
		Body: map[string]string{"source_branch": in.SourceBranch, "target_branch": in.TargetBranch, "title": in.Title,
			"description": in.Description}})
	if err != nil {
		return ChangeRequest{}, err
	}
	if r.Status != http.StatusCreated {
		msg := gitlabMessage(r)
		switch {
		case r.Status == http.StatusConflict:
			return ChangeRequest{}, connector.ClientFailure(r, fault.Conflict, connector.CodeChangeRequestExists,
				"an open change request for these branches already exists")
		case strings.Contains(msg, "branch") && (r.Status == http.StatusNotFound || r.Status == http.StatusUnprocessableEntity || r.Status == http.StatusBadRequest):
			return ChangeRequest{}, connector.ClientFailure(r, fault.NotFound, connector.CodeBranchNotFound,
				"the source or target branch does not exist in the bound repository")
		case r.Status == http.StatusNotFound:
			return ChangeRequest{}, connector.ClientFailure(r, fault.NotFound, connector.CodeRepositoryNotFound,
				"gitlab does not know the bound project (or the credential cannot see it)")
		}
		return ChangeRequest{}, gitlabFailure(r)
	}
	return decodeRecord[gitlabMR]("gitlab", r)
}

func (gitlab) merge(ctx context.Context, t connector.Target, repo connector.Repository, number int, method string) (ChangeRequest, error) {
	body := map[string]any{}
	if method == "squash" {
		body["squash"] = true
	}
	r, err := connector.Do(ctx, t, "gitlab", connector.Request{Method: http.MethodPut,
		URL: fmt.Sprintf("%s/merge_requests/%d/merge", GitLabProjectURL(t, repo), number), Header: GitLabHeader(t), Body: body})
	if err != nil {
		return ChangeRequest{}, err
	}
	if err := mergeRefusal(r, number, "closed, conflicting or blocked", gitlabFailure,
		http.StatusMethodNotAllowed, http.StatusNotAcceptable, http.StatusConflict, http.StatusUnprocessableEntity); err != nil {
		return ChangeRequest{}, err
	}
	return decodeRecord[gitlabMR]("gitlab", r)
}
