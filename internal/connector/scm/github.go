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

// github follows the GitHub REST API, version 2022-11-28: the base URL is the API root
// (https://api.github.com, or https://HOST/api/v3 for GitHub Enterprise Server).
type github struct{}

// GitHubHeader is the auth and version header set of every GitHub call.
func GitHubHeader(t connector.Target) map[string]string {
	return map[string]string{
		"Authorization":        "Bearer " + t.Token.Reveal(),
		"Accept":               "application/vnd.github+json",
		"X-GitHub-Api-Version": "2022-11-28",
	}
}

func githubRepoURL(t connector.Target, repo connector.Repository) string {
	return connector.Join(t.BaseURL, "/repos/"+url.PathEscape(repo.Owner)+"/"+url.PathEscape(repo.Name))
}

// githubFailure maps GitHub's answers: 403 with x-ratelimit-remaining 0 is a rate limit, and
// 422 "Validation Failed" carries the reason in errors[] (a PR that exists, a branch that
// does not).
func githubFailure(r *connector.Response) error {
	if r.Status == http.StatusForbidden && r.Header.Get("X-Ratelimit-Remaining") == "0" {
		r.Status = http.StatusTooManyRequests
		e := connector.Failure("github", r)
		e.ProviderStatus = http.StatusForbidden
		return e
	}
	if r.Status == http.StatusUnprocessableEntity {
		var body struct {
			Errors []struct {
				Field   string `json:"field"`
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"errors"`
		}
		_ = r.Decode("github", &body)
		for _, e := range body.Errors {
			switch {
			case strings.Contains(e.Message, "already exists"):
				return connector.ClientFailure(r, fault.Conflict, connector.CodeChangeRequestExists,
					"an open change request for these branches already exists")
			case (e.Field == "head" || e.Field == "base") && e.Code == "invalid":
				return connector.ClientFailure(r, fault.NotFound, connector.CodeBranchNotFound,
					fmt.Sprintf("the %s branch does not exist in the bound repository", branchSide(e.Field)))
			}
		}
	}
	if r.Status == http.StatusNotFound {
		return connector.ClientFailure(r, fault.NotFound, connector.CodeRepositoryNotFound,
			"github does not know the bound repository (or the credential cannot see it)")
	}
	return connector.Failure("github", r)
}

func branchSide(field string) string {
	if field == "head" {
		return "source"
	}
	return "target"
}

func (github) create(ctx context.Context, t connector.Target, repo connector.Repository, in CreateInput) (ChangeRequest, error) {
	r, err := connector.Do(ctx, t, "github", connector.Request{Method: http.MethodPost, URL: githubRepoURL(t, repo) + "/pulls",
		Header: GitHubHeader(t),
		Body:   map[string]string{"title": in.Title, "head": in.SourceBranch, "base": in.TargetBranch, "body": in.Description}})
	if err != nil {
		return ChangeRequest{}, err
	}
	if r.Status != http.StatusCreated {
		return ChangeRequest{}, githubFailure(r)
	}
	return decodeRecord[pull]("github", r)
}

func (github) merge(ctx context.Context, t connector.Target, repo connector.Repository, number int, method string) (ChangeRequest, error) {
	pullURL := fmt.Sprintf("%s/pulls/%d", githubRepoURL(t, repo), number)
	r, err := connector.Do(ctx, t, "github", connector.Request{Method: http.MethodPut, URL: pullURL + "/merge",
		Header: GitHubHeader(t), Body: map[string]string{"merge_method": method}})
	if err != nil {
		return ChangeRequest{}, err
	}
	if err := mergeRefusal(r, number, "closed, conflicting or blocked by checks", githubFailure,
		http.StatusMethodNotAllowed, http.StatusConflict); err != nil {
		return ChangeRequest{}, err
	}
	return getPull(ctx, t, "github", pullURL, GitHubHeader(t), githubFailure)
}
