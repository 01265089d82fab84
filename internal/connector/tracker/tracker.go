// Package tracker is the issue-tracker family: connector:tracker.issue.create@1 on GitHub
// issues (REST 2022-11-28), GitLab issues (REST v4) and Gitea issues (API v1), in the
// repository the caller's binding names.
package tracker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/xemahq/xema/internal/connector"
	"github.com/xemahq/xema/internal/connector/scm"
	"github.com/xemahq/xema/internal/kernel"
)

// RefCreateIssue is the family's capability.
const RefCreateIssue = "connector:tracker.issue.create@1"

// Issue is the answer: the same record for every provider.
type Issue struct {
	ID         string `json:"id"`
	ExternalID string `json:"externalId"`
	Title      string `json:"title"`
	Status     string `json:"status"` // open | closed
	URL        string `json:"url"`
	CreatedAt  string `json:"createdAt"`
}

// Input is the input of connector:tracker.issue.create@1.
type Input struct {
	Title  string   `json:"title"`
	Body   string   `json:"body"`
	Labels []string `json:"labels"`
}

// issue is the fields the three providers share under the same names; GitLab calls the
// per-project number iid and the page web_url.
type issue struct {
	Number    int    `json:"number"`
	IID       int    `json:"iid"`
	Title     string `json:"title"`
	State     string `json:"state"`
	HTMLURL   string `json:"html_url"`
	WebURL    string `json:"web_url"`
	CreatedAt string `json:"created_at"`
}

// Handlers returns the family's handler for provider ("github", "gitlab" or "gitea").
func Handlers(provider string) map[string]connector.Handler {
	switch provider {
	case "github", "gitlab", "gitea":
	default:
		return nil
	}
	return map[string]connector.Handler{RefCreateIssue: func(ctx context.Context, t connector.Target, call kernel.Call) (any, error) {
		in, repo, err := connector.RepositoryCall[Input](t, call)
		if err != nil {
			return nil, err
		}
		req := request(provider, t, repo, in)
		r, err := connector.Do(ctx, t, provider, req)
		if err != nil {
			return nil, err
		}
		switch r.Status {
		case http.StatusCreated:
		case http.StatusNotFound, http.StatusGone:
			return nil, connector.ClientFailure(r, http.StatusNotFound, connector.CodeRepositoryNotFound,
				provider+" does not know the bound repository or its issues are disabled")
		default:
			return nil, connector.Failure(provider, r)
		}
		var is issue
		if err := r.Decode(provider, &is); err != nil {
			return nil, err
		}
		return record(provider, t, repo, is), nil
	}}
}

func request(provider string, t connector.Target, repo connector.Repository, in Input) connector.Request {
	switch provider {
	case "gitlab":
		body := map[string]string{"title": in.Title, "description": in.Body}
		if len(in.Labels) > 0 {
			body["labels"] = strings.Join(in.Labels, ",")
		}
		return connector.Request{Method: http.MethodPost, URL: scm.GitLabProjectURL(t, repo) + "/issues",
			Header: scm.GitLabHeader(t), Body: body}
	case "gitea":
		// Gitea's labels are ids, not names; naming labels is left to the GitHub and GitLab
		// providers.
		return connector.Request{Method: http.MethodPost, URL: scm.GiteaRepoURL(t, repo) + "/issues",
			Header: scm.GiteaHeader(t), Body: map[string]string{"title": in.Title, "body": in.Body}}
	}
	body := map[string]any{"title": in.Title, "body": in.Body}
	if len(in.Labels) > 0 {
		body["labels"] = in.Labels
	}
	return connector.Request{Method: http.MethodPost,
		URL:    connector.Join(t.BaseURL, "/repos/"+url.PathEscape(repo.Owner)+"/"+url.PathEscape(repo.Name)+"/issues"),
		Header: scm.GitHubHeader(t), Body: body}
}

func record(provider string, t connector.Target, repo connector.Repository, is issue) Issue {
	number, page, status := is.Number, is.HTMLURL, is.State
	if provider == "gitlab" {
		number, page = is.IID, is.WebURL
		if status == "opened" {
			status = "open"
		}
	}
	ext := fmt.Sprint(number)
	h := sha256.Sum256([]byte(provider + "\x00" + t.BaseURL + "\x00" + repo.FullName() + "\x00issue\x00" + ext))
	return Issue{ID: "iss_" + hex.EncodeToString(h[:10]), ExternalID: ext, Title: is.Title, Status: status, URL: page,
		CreatedAt: is.CreatedAt}
}
