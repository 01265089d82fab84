// Package apptest builds a whole gateway (app.App on SQLite in a temp dir) with the e2e
// ticketing biome served by a provider of the test's own, for tests of the funnel and of the
// packages around it that need a real policy, catalog, store and audit log.
package apptest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/app"
	"github.com/xemahq/xema/internal/catalog"
	"github.com/xemahq/xema/internal/egress"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/gateway"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/manifest"
	"github.com/xemahq/xema/internal/notify"
)

// Fixture is a running gateway with ticketing installed in the default org.
type Fixture struct {
	App      *app.App
	Provider *httptest.Server
	// Now is the approvals' clock; tests move it.
	Now *time.Time

	biomeID, version, digest string
	dir                      string // the biome's files, as submitted
}

// Regrant approves the ticketing version again with another customization (ref → object):
// the org's grant changes under calls already held.
func (f *Fixture) Regrant(t testing.TB, customize map[string]any) {
	t.Helper()
	req, _ := json.Marshal(map[string]any{"biomeId": f.biomeID, "version": f.version, "digestHash": f.digest, "customize": customize})
	if _, err := f.App.Publisher.Install(context.Background(), req, identity.DefaultOrg, "user:root"); err != nil {
		t.Fatal(err)
	}
}

// Upgrade submits the biome again as version and grants the org that version with customize:
// the org's grant pins another version under calls already held.
func (f *Fixture) Upgrade(t testing.TB, version string, customize map[string]any) {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(f.dir, "biome.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(raw), `"version": "`+f.version+`"`, `"version": "`+version+`"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	b, problems, err := manifest.LoadDir(f.dir)
	if err != nil || len(problems) > 0 || b.Version != version {
		t.Fatalf("load biome %s: %v %v", version, err, problems)
	}
	res, err := f.App.Publisher.SubmitDir(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	f.version, f.digest = res.Version, res.Digest.Hash
	f.Regrant(t, customize)
}

// Options shape a fixture.
type Options struct {
	// Provider answers the biome's http invocations; nil answers {"commentId":"c1"}.
	Provider http.HandlerFunc
	// Customize is the grant's per-ref customization (ref → object).
	Customize map[string]any
	// Contributions are the ticketing contribution files to install; nil is comment only.
	Contributions []string
	// Notify is who is told of held calls.
	Notify notify.Config
	// Copies installs the comment capability under that many more refs as well
	// (ticket:comment<i>.add@1, CopyRef), each a key of its own for the policy.
	Copies int
	// ResourceTicket marks the comment capability's ticketId its resource property
	// (x-xema-resource), so a grant's resources bind its calls.
	ResourceTicket bool
	// Classification, when set, replaces the comment capability's outputClassification
	// (internal).
	Classification string
	// MaxPending bounds each subject's pending held calls; 0 is the gateway's default.
	MaxPending int
	// PublicURL turns connections on (app.Config.PublicURL); "" leaves them off.
	PublicURL string
}

// CopyRef is the ref of the i-th copy of the comment capability (Options.Copies).
func CopyRef(i int) string { return fmt.Sprintf("ticket:comment%d.add@1", i) }

// New starts a fixture; it closes with the test.
func New(t testing.TB, o Options) *Fixture {
	t.Helper()
	ctx := context.Background()
	if o.Provider == nil {
		o.Provider = func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"commentId":"c1"}`))
		}
	}
	if o.Contributions == nil {
		o.Contributions = []string{"comment.capability.contribution.json"}
	}
	prov := httptest.NewServer(o.Provider)
	t.Cleanup(prov.Close)
	now := time.Now()
	a, err := app.New(ctx, app.Config{DataDir: t.TempDir(), ApprovalTTL: time.Hour, EgressAllow: egress.Loopback(),
		OperatorOrg: identity.DefaultOrg, Tokens: staticToken(ServiceToken), Notify: o.Notify, MaxPendingApprovals: o.MaxPending,
		PublicURL: o.PublicURL,
		Now:       func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })

	_, file, _, _ := runtime.Caller(0)
	src := filepath.Join(filepath.Dir(file), "..", "..", "test", "e2e", "testdata", "ticketing")
	dir := filepath.Join(t.TempDir(), "ticketing")
	if err := os.MkdirAll(filepath.Join(dir, "contributions"), 0o755); err != nil {
		t.Fatal(err)
	}
	files := []string{"biome.json"}
	for _, c := range o.Contributions {
		files = append(files, filepath.Join("contributions", c))
	}
	for _, f := range files {
		raw, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		text := strings.ReplaceAll(string(raw), "http://PROVIDER", prov.URL)
		if o.Classification != "" {
			text = strings.Replace(text, `"outputClassification": "internal"`, `"outputClassification": "`+o.Classification+`"`, 1)
		}
		if o.ResourceTicket {
			text = strings.Replace(text, `"x-xema-resourceType": "ticket"`, `"x-xema-resourceType": "ticket", "`+manifest.ResourceAnnotation+`": true`, 1)
		}
		if err := os.WriteFile(filepath.Join(dir, f), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := writeCopies(dir, o.Copies); err != nil {
		t.Fatal(err)
	}
	b, problems, err := manifest.LoadDir(dir)
	if err != nil || len(problems) > 0 {
		t.Fatalf("load biome: %v %v", err, problems)
	}
	res, err := a.Publisher.SubmitDir(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := json.Marshal(map[string]any{"biomeId": res.BiomeID, "version": res.Version, "digestHash": res.Digest.Hash,
		"customize": o.Customize})
	if _, err := a.Publisher.Install(ctx, req, identity.DefaultOrg, "user:root"); err != nil {
		t.Fatal(err)
	}
	return &Fixture{App: a, Provider: prov, Now: &now, biomeID: res.BiomeID, version: res.Version, digest: res.Digest.Hash, dir: dir}
}

// writeCopies adds n copies of dir's comment contribution under CopyRef(i) and names them
// in its biome.json.
func writeCopies(dir string, n int) error {
	if n == 0 {
		return nil
	}
	comment, err := os.ReadFile(filepath.Join(dir, "contributions", "comment.capability.contribution.json"))
	if err != nil {
		return err
	}
	var biome map[string]any
	raw, err := os.ReadFile(filepath.Join(dir, "biome.json"))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, &biome); err != nil {
		return err
	}
	requires, _ := biome["requiresCapabilities"].([]any)
	hints, _ := biome["permissionHints"].([]any)
	for i := range n {
		c := strings.Replace(string(comment), "ticket:comment.add@1", CopyRef(i), 1)
		if err := os.WriteFile(filepath.Join(dir, "contributions", fmt.Sprintf("comment%d.capability.contribution.json", i)), []byte(c), 0o644); err != nil {
			return err
		}
		requires = append(requires, CopyRef(i))
		hints = append(hints, map[string]any{"capability": CopyRef(i), "reason": "A copy of the comment capability."})
	}
	biome["requiresCapabilities"], biome["permissionHints"] = requires, hints
	raw, err = json.Marshal(biome)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "biome.json"), raw, 0o644)
}

// ServiceToken is the gateway's outbound service token in these tests (auth kind
// service-token); the biome's provider ignores it.
const ServiceToken = "test-service-token"

// staticToken is the gateway's outbound token in these tests.
type staticToken string

func (s staticToken) Token(context.Context, string) (string, error) { return string(s), nil }

// Exec is a verified context of the default org, armed for everything.
func Exec(subject, env, orgRole string) identity.ExecContext {
	kind, _, _ := strings.Cut(subject, ":")
	return identity.ExecContext{Subject: identity.Subject{Kind: kind, Ref: subject}, Environment: env, OrgRole: orgRole,
		Org: identity.DefaultOrg, Armed: []string{"*"}}
}

// Admin is a verified org administrator of org: a person, whom the humanBaseline of the
// gateway's own operations admits.
func Admin(org string) identity.ExecContext {
	ec := Exec("user:alice", "org", "org_admin")
	ec.Org = org
	return ec
}

// Call invokes ref with input (marshalled to JSON) as ec through the fixture's funnel.
func (f *Fixture) Call(t testing.TB, ec identity.ExecContext, ref string, input any) (*gateway.Result, error) {
	t.Helper()
	raw, err := json.Marshal(input)
	if err != nil {
		t.Fatal(err)
	}
	return f.App.Gateway.Invoke(context.Background(), ec, gateway.Request{Ref: ref, Input: raw})
}

// Output is the output of a call that ran, decoded strictly as T: a field T lacks fails the
// test, so the answer is exactly T's shape.
func Output[T any](t testing.TB, res *gateway.Result, err error) T {
	t.Helper()
	var out T
	if err != nil || res.Denial != nil || res.Held != nil {
		t.Fatalf("want a call that ran; got error %v, %s", err, describe(res))
	}
	dec := json.NewDecoder(bytes.NewReader(res.Output))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("output %s as %T: %v", res.Output, out, err)
	}
	return out
}

// describe is a result as a failing test shows it: the output as text.
func describe(res *gateway.Result) string {
	switch {
	case res == nil:
		return "no result"
	case res.Denial != nil:
		return fmt.Sprintf("denial %s %q", res.Denial.Code, res.Denial.Message)
	case res.Held != nil:
		return fmt.Sprintf("held %s", res.Held.ApprovalID)
	}
	return "output " + string(res.Output)
}

// Fault is err as a *fault.Error of kind and code, failing the test otherwise.
func Fault(t testing.TB, res *gateway.Result, err error, kind fault.Kind, code string) *fault.Error {
	t.Helper()
	var fe *fault.Error
	if !errors.As(err, &fe) {
		t.Fatalf("want a %v %s error; got %T %v, %s", kind, code, err, err, describe(res))
	}
	if fe.Kind != kind || fe.Code != code {
		t.Fatalf("error %v %s %q, want %v %s", fe.Kind, fe.Code, fe.Message, kind, code)
	}
	return fe
}

// Names reports whether e names the field at pointer: a violation at it, a violation of its
// parent naming it (a missing required property), or the message.
func Names(e *fault.Error, pointer string) bool {
	i := strings.LastIndex(pointer, "/")
	parent, name := pointer[:max(i, 0)], pointer[i+1:]
	for _, v := range e.Violations {
		if v.Path == pointer || (v.Path == parent && strings.Contains(v.Message, name)) {
			return true
		}
	}
	return strings.Contains(e.Message, pointer)
}

// Denied fails the test unless the policy refused the call.
func Denied(t testing.TB, res *gateway.Result, err error) {
	t.Helper()
	if err != nil || res.Denial == nil {
		t.Fatalf("want a denial; got error %v, %s", err, describe(res))
	}
}

// State is what the admin operations change, as one comparable text: every grant of every
// org, every biome's owner and versions, every capability's lifecycle.
func (f *Fixture) State(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	grants, err := f.App.Store.ListGrants(ctx)
	if err != nil {
		t.Fatal(err)
	}
	owners, err := f.App.Store.BiomeOwners(ctx)
	if err != nil {
		t.Fatal(err)
	}
	versions := map[string]int{}
	for id := range owners {
		vs, err := f.App.Store.ListBiomeVersions(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		versions[id] = len(vs)
	}
	caps, err := f.App.Store.ListCapabilities(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lifecycles := map[string]string{}
	for _, c := range caps {
		lifecycles[c.Ref] = c.Lifecycle
	}
	raw, err := json.Marshal(map[string]any{"grants": grants, "owners": owners, "versions": versions, "lifecycles": lifecycles})
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// Submission is a biome of one capability, ref, served by the fixture's provider: what an
// org submits as its own (biome:submit-to-store@1).
func (f *Fixture) Submission(id, version, ref string) catalog.Submission {
	biome := fmt.Sprintf(`{"id": %q, "version": %q, "requiresCapabilities": [%q], "defaultProfile": "internal-agent",
		"permissionHints": [{"capability": %q, "reason": "Adds a note."}]}`, id, version, ref, ref)
	contribution := fmt.Sprintf(`{"kind": "capability", "manifest": {"ref": %q, "title": "Add a note",
		"summary": "Adds a note.", "sideEffects": "Adds a note.", "riskTier": "low", "requiresApproval": false,
		"effectClass": "write", "reach": "integration", "outputClassification": "internal", "authorityEffect": "none",
		"safeForAgents": true, "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
		"outputSchema": {"type": "object"}}, "invocation": {"kind": "http", "url": %q, "timeoutMs": 5000}}`, ref, f.Provider.URL+"/note")
	return catalog.Submission{Manifest: json.RawMessage(biome), Contributions: []json.RawMessage{json.RawMessage(contribution)}}
}
