package connector

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/kernel"
)

func TestRepositoryCall(t *testing.T) {
	type input struct {
		Title string `json:"title"`
	}
	tests := []struct {
		name      string
		config    string
		input     string
		wantTitle string
		wantRepo  Repository
		wantCode  string // fault.Error code; "" with wantErr means a plain decode error
		wantErr   bool
	}{
		{name: "decodes input and binding", config: `{"repository":"acme/site"}`, input: `{"title":"t"}`,
			wantTitle: "t", wantRepo: Repository{Owner: "acme", Name: "site"}},
		{name: "nested gitlab group", config: `{"repository":"a/b/site"}`, input: `{}`,
			wantRepo: Repository{Owner: "a/b", Name: "site"}},
		{name: "binding no longer parses", config: `{"repository":"nope"}`, input: `{"title":"t"}`,
			wantErr: true, wantCode: "BINDING_INVALID"},
		{name: "input not an object", config: `{"repository":"acme/site"}`, input: `[1]`, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in, repo, err := RepositoryCall[input](Target{Config: json.RawMessage(tc.config)},
				kernel.Call{Input: json.RawMessage(tc.input)})
			if tc.wantErr {
				if err == nil {
					t.Fatalf("err = nil, want an error")
				}
				var re *fault.Error
				isRunner := errors.As(err, &re)
				if tc.wantCode == "" && isRunner {
					t.Fatalf("err = %v, want a decode error, not a runner error", err)
				}
				if tc.wantCode != "" && (!isRunner || re.Code != tc.wantCode || re.Kind != fault.Provider) {
					t.Fatalf("err = %v, want runner error %s (502)", err, tc.wantCode)
				}
				return
			}
			if err != nil {
				t.Fatalf("RepositoryCall: %v", err)
			}
			if in.Title != tc.wantTitle || repo != tc.wantRepo {
				t.Fatalf("got (%+v, %+v), want (%q, %+v)", in, repo, tc.wantTitle, tc.wantRepo)
			}
		})
	}
}
