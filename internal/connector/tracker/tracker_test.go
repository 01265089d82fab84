package tracker_test

// The GitHub and GitLab issue trackers cannot be reached from here (Gitea's is tested against
// a real Gitea in test/e2e). These fake servers follow each API's documented wire format:
//
//   - GitHub REST API version 2022-11-28: POST /repos/{owner}/{repo}/issues with a JSON body
//     {"title", "body", "labels": [names]}, headers Authorization "Bearer <token>", Accept
//     application/vnd.github+json and X-GitHub-Api-Version; it answers 201 with the issue
//     (id, number, title, state "open", html_url, created_at), 401 {"message": "Bad
//     credentials"}, 404 {"message": "Not Found"} for a repository it does not show, and 410
//     {"message": "Issues are disabled for this repo"}.
//   - GitLab REST API v4: POST /api/v4/projects/:id/issues, :id the URL-encoded full path, with
//     {"title", "description", "labels": "comma,separated"} and the PRIVATE-TOKEN header; it
//     answers 201 with the issue (id, iid, title, state "opened", web_url, created_at), 401
//     {"message": "401 Unauthorized"} and 404 {"message": "404 Project Not Found"}.

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/xemahq/xema/internal/connector"
	"github.com/xemahq/xema/internal/connector/tracker"
	"github.com/xemahq/xema/internal/credential"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/kernel"
)

const token = "tok_S3CRET_never_echoed"

// fakeTracker records the issues created and the request bodies it was sent.
type fakeTracker struct {
	mu       sync.Mutex
	disabled bool // GitHub: issues disabled for the repository (410)
	bodies   []map[string]any
	issues   int
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (f *fakeTracker) github(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer "+token {
		writeJSON(w, 401, map[string]string{"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest"})
		return
	}
	if r.Header.Get("X-GitHub-Api-Version") != "2022-11-28" || r.Header.Get("Accept") != "application/vnd.github+json" {
		writeJSON(w, 400, map[string]string{"message": "unsupported API version or media type"})
		return
	}
	if r.Method != http.MethodPost || r.URL.Path != "/repos/acme/app/issues" {
		writeJSON(w, 404, map[string]string{"message": "Not Found"})
		return
	}
	if f.disabled {
		writeJSON(w, 410, map[string]string{"message": "Issues are disabled for this repo"})
		return
	}
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body["title"] == nil {
		writeJSON(w, 422, map[string]any{"message": "Validation Failed",
			"errors": []map[string]string{{"resource": "Issue", "field": "title", "code": "missing_field"}}})
		return
	}
	f.bodies = append(f.bodies, body)
	f.issues++
	n := f.issues
	writeJSON(w, 201, map[string]any{"id": 9000 + n, "number": n, "title": body["title"], "body": body["body"], "state": "open",
		"html_url": "https://github.com/acme/app/issues/" + strconv.Itoa(n), "created_at": "2026-01-01T00:00:00Z"})
}

func (f *fakeTracker) gitlab(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Header.Get("PRIVATE-TOKEN") != token {
		writeJSON(w, 401, map[string]string{"message": "401 Unauthorized"})
		return
	}
	if r.Method != http.MethodPost || r.URL.EscapedPath() != "/api/v4/projects/acme%2Fapp/issues" {
		writeJSON(w, 404, map[string]string{"message": "404 Project Not Found"})
		return
	}
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body["title"] == nil {
		writeJSON(w, 400, map[string]string{"error": "title is missing"})
		return
	}
	f.bodies = append(f.bodies, body)
	f.issues++
	n := f.issues
	writeJSON(w, 201, map[string]any{"id": 7000 + n, "iid": n, "project_id": 3, "title": body["title"],
		"description": body["description"], "state": "opened", "web_url": "https://gitlab.example.com/acme/app/-/issues/" + strconv.Itoa(n),
		"created_at": "2026-01-01T00:00:00.000Z"})
}

func create(t *testing.T, provider, base, tok, repo, input string) (tracker.Issue, error) {
	t.Helper()
	h := tracker.Handlers(provider)[tracker.RefCreateIssue]
	if h == nil {
		t.Fatalf("no handler for %s", provider)
	}
	out, err := h(context.Background(), connector.Target{BaseURL: base, Config: json.RawMessage(`{"repository":"` + repo + `"}`),
		Token: credential.NewSecret(tok), HTTP: http.DefaultClient}, kernel.Call{Ref: tracker.RefCreateIssue, Input: json.RawMessage(input)})
	if err != nil {
		return tracker.Issue{}, err
	}
	return out.(tracker.Issue), nil
}

// TestCreateIssueGitHubGitLab: the same input gives the same record on both providers, the
// request bodies are each API's own, and failures map to the typed codes without the token.
func TestCreateIssueGitHubGitLab(t *testing.T) {
	for _, tc := range []struct {
		provider string
		wantBody map[string]any
		wantURL  string
	}{
		{"github", map[string]any{"title": "Login broken", "body": "seen on staging", "labels": []any{"bug", "ui"}},
			"https://github.com/acme/app/issues/1"},
		{"gitlab", map[string]any{"title": "Login broken", "description": "seen on staging", "labels": "bug,ui"},
			"https://gitlab.example.com/acme/app/-/issues/1"},
	} {
		t.Run(tc.provider, func(t *testing.T) {
			f := &fakeTracker{}
			handler := f.github
			if tc.provider == "gitlab" {
				handler = f.gitlab
			}
			srv := httptest.NewServer(http.HandlerFunc(handler))
			defer srv.Close()
			input := `{"title":"Login broken","body":"seen on staging","labels":["bug","ui"]}`

			is, err := create(t, tc.provider, srv.URL, token, "acme/app", input)
			if err != nil {
				t.Fatal(err)
			}
			if is.ExternalID != "1" || is.Title != "Login broken" || is.Status != "open" || is.URL != tc.wantURL ||
				!strings.HasPrefix(is.ID, "iss_") || is.CreatedAt == "" {
				t.Fatalf("record %+v", is)
			}
			if len(f.bodies) != 1 || !reflect.DeepEqual(f.bodies[0], tc.wantBody) {
				t.Fatalf("%s was sent %v, want %v", tc.provider, f.bodies, tc.wantBody)
			}
			// The record's id is stable for the same issue and differs for the next one.
			again, err := create(t, tc.provider, srv.URL, token, "acme/app", `{"title":"Second"}`)
			if err != nil || again.ExternalID != "2" || again.ID == is.ID {
				t.Fatalf("second issue %+v, %v (first %s)", again, err, is.ID)
			}
			if _, ok := f.bodies[1]["labels"]; ok {
				t.Fatalf("no labels given, but labels sent: %v", f.bodies[1])
			}

			for _, c := range []struct {
				name, tok, repo, want string
				kind                  fault.Kind
			}{
				{"bad credential", "wrong", "acme/app", connector.CodeCredentialRejected, fault.Provider},
				{"unknown repository", token, "acme/nope", connector.CodeRepositoryNotFound, fault.NotFound},
			} {
				_, err := create(t, tc.provider, srv.URL, c.tok, c.repo, input)
				var re *fault.Error
				if !errors.As(err, &re) || re.Code != c.want || re.Kind != c.kind || strings.Contains(re.Error(), token) {
					t.Errorf("%s: %v, want %s %v", c.name, err, c.want, c.kind)
				}
			}
			if tc.provider == "github" {
				f.disabled = true
				_, err := create(t, tc.provider, srv.URL, token, "acme/app", input)
				var re *fault.Error
				if !errors.As(err, &re) || re.Code != connector.CodeRepositoryNotFound {
					t.Errorf("issues disabled (410): %v, want %s", err, connector.CodeRepositoryNotFound)
				}
			}
		})
	}
}

// TestUnknownProvider: only the three trackers have a handler.
func TestUnknownProvider(t *testing.T) {
	if h := tracker.Handlers("bitbucket"); h != nil {
		t.Fatalf("bitbucket has handlers %v", h)
	}
}
