package scm

import (
	"context"
	"fmt"
	"net/http"

	"github.com/xemahq/xema/internal/connector"
)

// pull is a pull request as GitHub answers it, and Gitea too, whose API v1 follows GitHub's
// pulls API: GitHub's answers always carry merged_at, Gitea's always carry merged.
type pull struct {
	Number    int    `json:"number"`
	Title     string `json:"title"`
	State     string `json:"state"` // open | closed
	Merged    bool   `json:"merged"`
	MergedAt  string `json:"merged_at"`
	CreatedAt string `json:"created_at"`
	UpdatedAt string `json:"updated_at"`
	Head      struct {
		Ref string `json:"ref"`
	} `json:"head"`
	Base struct {
		Ref string `json:"ref"`
	} `json:"base"`
}

func (p pull) record() ChangeRequest {
	status := p.State
	if p.Merged || p.MergedAt != "" {
		status = StatusMerged
	}
	return ChangeRequest{ExternalID: fmt.Sprint(p.Number), SourceBranch: p.Head.Ref, TargetBranch: p.Base.Ref,
		Title: p.Title, Status: status, CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt}
}

// getPull reads one pull request: a merge answer carries no pull, so a merge reads it after.
func getPull(ctx context.Context, t connector.Target, provider, url string, header map[string]string,
	fail func(*connector.Response) error) (ChangeRequest, error) {
	r, err := connector.Do(ctx, t, provider, connector.Request{Method: http.MethodGet, URL: url, Header: header})
	if err != nil {
		return ChangeRequest{}, err
	}
	if r.Status != http.StatusOK {
		return ChangeRequest{}, fail(r)
	}
	return decodeRecord[pull](provider, r)
}
