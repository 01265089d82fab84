package scm_test

// The GitHub and GitLab connectors cannot reach the real services here; these servers follow
// each API's documented wire format: GitHub REST API version 2022-11-28 (POST
// /repos/{owner}/{repo}/pulls answering 201, 422 "Validation Failed" with errors[] for an
// existing PR or an invalid head/base, 401 "Bad credentials", 403 with x-ratelimit-remaining
// 0 for the primary rate limit, 429 for the secondary; PUT .../pulls/{n}/merge answering 200,
// 405 not mergeable) and GitLab REST API v4 (POST /api/v4/projects/:id/merge_requests
// answering 201, 409 {"message": ["Another open merge request already exists ..."]}, 404
// {"message": "404 Project Not Found"}, 401 {"message": "401 Unauthorized"}; PUT
// .../merge_requests/:iid/merge answering 200 with state "merged", 405 not mergeable).

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/xemahq/xema/internal/connector"
	"github.com/xemahq/xema/internal/connector/scm"
	"github.com/xemahq/xema/internal/credential"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/kernel"
	"github.com/xemahq/xema/internal/runner"
)

const token = "tok_S3CRET_never_echoed"

// fakeRepo is the state both fake providers keep: branches and pull requests.
type fakeRepo struct {
	mu       sync.Mutex
	branches map[string]bool
	pulls    map[int]map[string]any
	mode     string // "" | "ratelimit" | "secondary"
	authSeen []string
}

func newRepo() *fakeRepo {
	return &fakeRepo{branches: map[string]bool{"main": true, "feature/x": true}, pulls: map[int]map[string]any{}}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// github serves /repos/acme/app/pulls and /repos/acme/app/pulls/{n}[/merge].
func (f *fakeRepo) github(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.authSeen = append(f.authSeen, r.Header.Get("Authorization"))
	if r.Header.Get("Authorization") != "Bearer "+token {
		writeJSON(w, 401, map[string]string{"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest"})
		return
	}
	if r.Header.Get("X-GitHub-Api-Version") != "2022-11-28" {
		writeJSON(w, 400, map[string]string{"message": "unsupported API version"})
		return
	}
	switch f.mode {
	case "ratelimit":
		w.Header().Set("X-Ratelimit-Remaining", "0")
		writeJSON(w, 403, map[string]string{"message": "API rate limit exceeded"})
		return
	case "secondary":
		w.Header().Set("Retry-After", "60")
		writeJSON(w, 429, map[string]string{"message": "You have exceeded a secondary rate limit"})
		return
	}
	if !strings.HasPrefix(r.URL.Path, "/repos/acme/app/pulls") {
		writeJSON(w, 404, map[string]string{"message": "Not Found"})
		return
	}
	rest := strings.TrimPrefix(r.URL.Path, "/repos/acme/app/pulls")
	switch {
	case rest == "" && r.Method == http.MethodPost:
		var in struct{ Title, Head, Base string }
		_ = json.NewDecoder(r.Body).Decode(&in)
		for _, side := range []struct{ field, name string }{{"head", in.Head}, {"base", in.Base}} {
			if !f.branches[side.name] {
				writeJSON(w, 422, map[string]any{"message": "Validation Failed",
					"errors": []map[string]string{{"resource": "PullRequest", "field": side.field, "code": "invalid"}}})
				return
			}
		}
		for _, p := range f.pulls {
			if p["head"].(map[string]any)["ref"] == in.Head && p["state"] == "open" {
				writeJSON(w, 422, map[string]any{"message": "Validation Failed",
					"errors": []map[string]string{{"resource": "PullRequest", "code": "custom", "message": "A pull request already exists for acme:" + in.Head + "."}}})
				return
			}
		}
		n := len(f.pulls) + 1
		p := map[string]any{"id": 1000 + n, "number": n, "title": in.Title, "state": "open", "merged_at": nil,
			"created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",
			"head": map[string]any{"ref": in.Head}, "base": map[string]any{"ref": in.Base}}
		f.pulls[n] = p
		writeJSON(w, 201, p)
	case strings.HasSuffix(rest, "/merge") && r.Method == http.MethodPut:
		p := f.pulls[atoi(strings.TrimSuffix(strings.TrimPrefix(rest, "/"), "/merge"))]
		if p == nil {
			writeJSON(w, 404, map[string]string{"message": "Not Found"})
			return
		}
		if p["state"] != "open" {
			writeJSON(w, 405, map[string]string{"message": "Pull Request is not mergeable"})
			return
		}
		p["state"], p["merged_at"], p["updated_at"] = "closed", "2026-01-02T00:00:00Z", "2026-01-02T00:00:00Z"
		writeJSON(w, 200, map[string]any{"sha": "abc", "merged": true, "message": "Pull Request successfully merged"})
	case r.Method == http.MethodGet:
		p := f.pulls[atoi(strings.TrimPrefix(rest, "/"))]
		if p == nil {
			writeJSON(w, 404, map[string]string{"message": "Not Found"})
			return
		}
		writeJSON(w, 200, p)
	default:
		writeJSON(w, 404, map[string]string{"message": "Not Found"})
	}
}

// gitlab serves /api/v4/projects/acme%2Fapp/merge_requests[/:iid/merge].
func (f *fakeRepo) gitlab(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.authSeen = append(f.authSeen, r.Header.Get("PRIVATE-TOKEN"))
	if r.Header.Get("PRIVATE-TOKEN") != token {
		writeJSON(w, 401, map[string]string{"message": "401 Unauthorized"})
		return
	}
	if f.mode == "secondary" || f.mode == "ratelimit" {
		w.Header().Set("Retry-After", "30")
		writeJSON(w, 429, map[string]string{"message": "Retry later"})
		return
	}
	const prefix = "/api/v4/projects/acme%2Fapp/merge_requests"
	path := r.URL.EscapedPath()
	if !strings.HasPrefix(path, prefix) {
		writeJSON(w, 404, map[string]string{"message": "404 Project Not Found"})
		return
	}
	rest := strings.TrimPrefix(path, prefix)
	switch {
	case rest == "" && r.Method == http.MethodPost:
		var in struct {
			Source string `json:"source_branch"`
			Target string `json:"target_branch"`
			Title  string `json:"title"`
		}
		_ = json.NewDecoder(r.Body).Decode(&in)
		if !f.branches[in.Source] || !f.branches[in.Target] {
			writeJSON(w, 422, map[string]any{"message": []string{"Source branch \"" + in.Source + "\" does not exist"}})
			return
		}
		for iid, p := range f.pulls {
			if p["source_branch"] == in.Source && p["state"] == "opened" {
				writeJSON(w, 409, map[string]any{"message": []string{"Another open merge request already exists for this source branch: !" + strconv.Itoa(iid)}})
				return
			}
		}
		iid := len(f.pulls) + 1
		p := map[string]any{"id": 5000 + iid, "iid": iid, "title": in.Title, "state": "opened", "source_branch": in.Source,
			"target_branch": in.Target, "created_at": "2026-01-01T00:00:00.000Z", "updated_at": "2026-01-01T00:00:00.000Z"}
		f.pulls[iid] = p
		writeJSON(w, 201, p)
	case strings.HasSuffix(rest, "/merge") && r.Method == http.MethodPut:
		p := f.pulls[atoi(strings.TrimSuffix(strings.TrimPrefix(rest, "/"), "/merge"))]
		if p == nil {
			writeJSON(w, 404, map[string]string{"message": "404 Not found"})
			return
		}
		if p["state"] != "opened" {
			writeJSON(w, 405, map[string]string{"message": "405 Method Not Allowed"})
			return
		}
		p["state"], p["updated_at"] = "merged", "2026-01-02T00:00:00.000Z"
		writeJSON(w, 200, p)
	default:
		writeJSON(w, 404, map[string]string{"message": "404 Not found"})
	}
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n
}

func call(t *testing.T, provider, ref, base, tok, input string) (scm.ChangeRequest, error) {
	t.Helper()
	h := scm.Handlers(provider)[ref]
	out, err := h(context.Background(), connector.Target{BaseURL: base, Config: json.RawMessage(`{"repository":"acme/app"}`),
		Token: credential.NewSecret(tok), HTTP: http.DefaultClient}, kernel.Call{Ref: ref, Input: json.RawMessage(input)})
	if err != nil {
		return scm.ChangeRequest{}, err
	}
	return out.(scm.ChangeRequest), nil
}

func code(err error) string {
	var re *fault.Error
	if errors.As(err, &re) {
		return re.Code
	}
	return ""
}

// TestSameRecordEveryProvider: the caller's input and the record's shape do not depend on the
// provider; errors map to the same typed codes.
func TestSameRecordEveryProvider(t *testing.T) {
	for _, provider := range []string{"github", "gitlab"} {
		t.Run(provider, func(t *testing.T) {
			f := newRepo()
			handler := f.github
			if provider == "gitlab" {
				handler = f.gitlab
			}
			srv := httptest.NewServer(http.HandlerFunc(handler))
			defer srv.Close()
			create := `{"sourceBranch":"feature/x","targetBranch":"main","title":"Add x"}`

			cr, err := call(t, provider, scm.RefCreatePullRequest, srv.URL, token, create)
			if err != nil {
				t.Fatal(err)
			}
			if cr.ExternalID != "1" || cr.Status != scm.StatusOpen || cr.SourceBranch != "feature/x" || cr.TargetBranch != "main" ||
				cr.Title != "Add x" || !strings.HasPrefix(cr.ID, "cr_") || cr.CreatedAt == "" || cr.UpdatedAt == "" {
				t.Fatalf("record %+v", cr)
			}
			for _, tc := range []struct {
				name, ref, tok, input, mode, want string
				kind                              fault.Kind
			}{
				{"exists", scm.RefCreatePullRequest, token, create, "", connector.CodeChangeRequestExists, fault.Conflict},
				{"no branch", scm.RefCreatePullRequest, token, `{"sourceBranch":"nope","targetBranch":"main","title":"t"}`, "", connector.CodeBranchNotFound, fault.NotFound},
				{"bad credential", scm.RefCreatePullRequest, "wrong", create, "", connector.CodeCredentialRejected, fault.Provider},
				{"rate limited", scm.RefCreatePullRequest, token, create, "ratelimit", connector.CodeRateLimited, fault.RateLimited},
				{"secondary rate limit", scm.RefCreatePullRequest, token, create, "secondary", connector.CodeRateLimited, fault.RateLimited},
				{"merge unknown", scm.RefMerge, token, `{"externalId":"99"}`, "", connector.CodeNotFound, fault.NotFound},
			} {
				f.mode = tc.mode
				_, err := call(t, provider, tc.ref, srv.URL, tc.tok, tc.input)
				var re *fault.Error
				if !errors.As(err, &re) || re.Code != tc.want || re.Kind != tc.kind || strings.Contains(re.Message, token) {
					t.Errorf("%s: %v (kind %v), want %s %v", tc.name, err, kindOf(err), tc.want, tc.kind)
				}
			}
			f.mode = ""
			merged, err := call(t, provider, scm.RefMerge, srv.URL, token, `{"externalId":"1"}`)
			if err != nil || merged.Status != scm.StatusMerged || merged.ID != cr.ID {
				t.Fatalf("merge = %+v, %v (created %s)", merged, err, cr.ID)
			}
			if _, err := call(t, provider, scm.RefMerge, srv.URL, token, `{"externalId":"1"}`); code(err) != connector.CodeNotMergeable {
				t.Fatalf("second merge = %v", err)
			}
		})
	}
}

func kindOf(err error) fault.Kind {
	var re *fault.Error
	if errors.As(err, &re) {
		return re.Kind
	}
	return fault.Internal
}

// TestUnreachableHidesURL: a transport failure never carries the URL (Telegram keeps the
// token in it).
func TestUnreachableHidesURL(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	base := srv.URL + "/" + token
	srv.Close()
	_, err := call(t, "gitea", scm.RefCreatePullRequest, base, token, `{"sourceBranch":"a","targetBranch":"b","title":"t"}`)
	if code(err) != runner.CodeUnreachable || strings.Contains(err.Error(), token) {
		t.Fatalf("unreachable: %v", err)
	}
}
