// Package scm is the source-control family: connector:scm.create-pull-request@1 and
// connector:scm.merge@1 for GitHub (REST 2022-11-28), GitLab (REST v4) and Gitea (API v1).
// Every provider answers the same change-request record, so a binding can point at another
// provider without the caller noticing.
package scm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/xemahq/xema/internal/connector"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/kernel"
)

// Refs of the family.
const (
	RefCreatePullRequest = "connector:scm.create-pull-request@1"
	RefMerge             = "connector:scm.merge@1"
)

// Change-request statuses, the same for every provider.
const (
	StatusOpen   = "open"
	StatusClosed = "closed"
	StatusMerged = "merged"
)

// ChangeRequest is the answer of both capabilities (the spec's change-request record).
type ChangeRequest struct {
	ID           string `json:"id"`
	ExternalID   string `json:"externalId"`
	SourceBranch string `json:"sourceBranch"`
	TargetBranch string `json:"targetBranch"`
	Title        string `json:"title"`
	Status       string `json:"status"`
	CreatedAt    string `json:"createdAt"`
	UpdatedAt    string `json:"updatedAt"`
}

// CreateInput is the input of connector:scm.create-pull-request@1.
type CreateInput struct {
	SourceBranch string `json:"sourceBranch"`
	TargetBranch string `json:"targetBranch"`
	Title        string `json:"title"`
	Description  string `json:"description"`
}

// MergeInput is the input of connector:scm.merge@1: the externalId a create answered.
type MergeInput struct {
	ExternalID string `json:"externalId"`
	Method     string `json:"method"` // merge (default) | squash | rebase
}

// api is what differs between providers: how to open and merge a change request.
type api interface {
	create(ctx context.Context, t connector.Target, repo connector.Repository, in CreateInput) (ChangeRequest, error)
	merge(ctx context.Context, t connector.Target, repo connector.Repository, number int, method string) (ChangeRequest, error)
}

// Handlers returns the family's handlers for provider ("github", "gitlab" or "gitea").
func Handlers(provider string) map[string]connector.Handler {
	var a api
	switch provider {
	case "github":
		a = github{}
	case "gitlab":
		a = gitlab{}
	case "gitea":
		a = gitea{}
	default:
		return nil
	}
	return map[string]connector.Handler{
		RefCreatePullRequest: func(ctx context.Context, t connector.Target, call kernel.Call) (any, error) {
			in, repo, err := connector.RepositoryCall[CreateInput](t, call)
			if err != nil {
				return nil, err
			}
			cr, err := a.create(ctx, t, repo, in)
			if err != nil {
				return nil, err
			}
			return stamp(provider, t, repo, cr), nil
		},
		RefMerge: func(ctx context.Context, t connector.Target, call kernel.Call) (any, error) {
			in, repo, err := connector.RepositoryCall[MergeInput](t, call)
			if err != nil {
				return nil, err
			}
			number, err := strconv.Atoi(in.ExternalID)
			if err != nil || number <= 0 {
				return nil, connector.InvalidInput("/externalId", "must be the externalId a create answered (a positive number)")
			}
			if in.Method == "" {
				in.Method = "merge"
			}
			cr, err := a.merge(ctx, t, repo, number, in.Method)
			if err != nil {
				return nil, err
			}
			return stamp(provider, t, repo, cr), nil
		},
	}
}

// stamp sets the record's id: stable for one change request of one bound repository, and
// opaque (it names no provider URL).
func stamp(provider string, t connector.Target, repo connector.Repository, cr ChangeRequest) ChangeRequest {
	h := sha256.Sum256([]byte(provider + "\x00" + t.BaseURL + "\x00" + repo.FullName() + "\x00" + cr.ExternalID))
	cr.ID = "cr_" + hex.EncodeToString(h[:10])
	return cr
}

// recorder is a provider's change-request answer.
type recorder interface{ record() ChangeRequest }

// decodeRecord reads a provider's change-request answer into the family's record.
func decodeRecord[T recorder](provider string, r *connector.Response) (ChangeRequest, error) {
	var v T
	if err := r.Decode(provider, &v); err != nil {
		return ChangeRequest{}, err
	}
	return v.record(), nil
}

// mergeRefusal maps a merge answer to the family's errors: nil for 200, NOT_FOUND for 404,
// NOT_MERGEABLE for the statuses the provider refuses a merge with (why lists what refuses
// one there), and fail's error for anything else.
func mergeRefusal(r *connector.Response, number int, why string, fail func(*connector.Response) error, refused ...int) error {
	switch {
	case r.Status == http.StatusOK:
		return nil
	case r.Status == http.StatusNotFound:
		return connector.ClientFailure(r, fault.NotFound, connector.CodeNotFound,
			fmt.Sprintf("no change request %d in the bound repository", number))
	case slices.Contains(refused, r.Status):
		return connector.ClientFailure(r, fault.Conflict, connector.CodeNotMergeable,
			fmt.Sprintf("change request %d cannot be merged (%s)", number, why))
	}
	return fail(r)
}
