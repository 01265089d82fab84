package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/grant"
	"github.com/xemahq/xema/internal/kernel"
	"github.com/xemahq/xema/internal/store"
	"github.com/xemahq/xema/internal/store/sqlite"
)

func newPublisher(t *testing.T) (*Publisher, *kernel.Registry) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "x.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	reg := kernel.New()
	return &Publisher{Store: st, Kernel: reg, Envs: grant.DefaultEnvironments(), Profiles: grant.Builtin(),
		Changed: func(context.Context) error { return nil }}, reg
}

func biomeJSON(id, version string, refs ...string) json.RawMessage {
	hints := make([]map[string]string, len(refs))
	for i, r := range refs {
		hints[i] = map[string]string{"capability": r, "reason": "needed"}
	}
	raw, _ := json.Marshal(map[string]any{"id": id, "version": version, "requiresCapabilities": refs,
		"permissionHints": hints, "defaultProfile": "internal-agent"})
	return raw
}

func contribution(ref, title string, invocation bool) json.RawMessage {
	inv := ""
	if invocation {
		inv = `,"invocation":{"kind":"http","url":"http://127.0.0.1:9/x","timeoutMs":1000}`
	}
	return json.RawMessage(fmt.Sprintf(`{"kind":"capability","manifest":{"ref":%q,"title":%q,"summary":"s","sideEffects":"none",
		"inputSchema":{"type":"object"},"outputSchema":{"type":"object"},"riskTier":"low","requiresApproval":false,"effectClass":"read"}%s}`, ref, title, inv))
}

func noop(context.Context, kernel.Call) (any, error) { return nil, nil }

func clientError(t *testing.T, err error, kind fault.Kind, fragment string) {
	t.Helper()
	var re *fault.Error
	if !errors.As(err, &re) || re.Kind != kind {
		t.Fatalf("error %v, want a client error of kind %v", err, kind)
	}
	all := re.Message
	for _, v := range re.Violations {
		all += " | " + v.Path + ": " + v.Message
	}
	if !strings.Contains(all, fragment) {
		t.Fatalf("error %q does not mention %q", all, fragment)
	}
}

func TestSubmitEnvelope(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name       string
		invocation bool
		liveRunner bool
		wantErr    string // "" = published
	}{
		{"declared invocation", true, false, ""},
		{"live runner", false, true, ""},
		{"no way to run", false, false, "/contributions/0: acme:thing.read@1 has no way to run"},
		{"two ways", true, true, "reachable in 2 ways"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, reg := newPublisher(t)
			if tc.liveRunner {
				if err := reg.Serve("acme:thing.read@1", noop); err != nil {
					t.Fatal(err)
				}
			}
			res, err := p.Submit(ctx, Submission{Manifest: biomeJSON("acme", "1.0.0", "acme:thing.read@1"),
				Contributions: []json.RawMessage{contribution("acme:thing.read@1", "Read", tc.invocation)}}, "org-a")
			caps, _ := p.Store.ListCapabilities(ctx)
			if tc.wantErr != "" {
				clientError(t, err, fault.Invalid, tc.wantErr)
				if len(caps) != 0 {
					t.Fatalf("a refused submission stored %d capabilities", len(caps))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(caps) != 1 || caps[0].Lifecycle != store.LifecycleSeeded || res.Digest.Hash == "" {
				t.Fatalf("caps %+v digest %q: want one seeded capability and a digest", caps, res.Digest.Hash)
			}
		})
	}
}

func TestSubmitInvalidManifestNamesBodyPaths(t *testing.T) {
	p, _ := newPublisher(t)
	bad := json.RawMessage(strings.Replace(string(contribution("acme:thing.read@1", "Read", true)), `"riskTier":"low"`, `"riskTier":"extreme"`, 1))
	_, err := p.Submit(context.Background(), Submission{Manifest: biomeJSON("acme", "1.0.0", "acme:thing.read@1"), Contributions: []json.RawMessage{bad}}, "org-a")
	clientError(t, err, fault.Invalid, "/contributions/0/manifest/riskTier")
}

func TestSubmitSameVersionOtherContentConflicts(t *testing.T) {
	ctx := context.Background()
	p, _ := newPublisher(t)
	sub := func(title string) error {
		_, err := p.Submit(ctx, Submission{Manifest: biomeJSON("acme", "1.0.0", "acme:thing.read@1"),
			Contributions: []json.RawMessage{contribution("acme:thing.read@1", title, true)}}, "org-a")
		return err
	}
	if err := sub("Read"); err != nil {
		t.Fatal(err)
	}
	if err := sub("Read"); err != nil {
		t.Fatalf("identical re-submission: %v", err)
	}
	clientError(t, sub("Read it all"), fault.Conflict, "already submitted with different content")
}

func TestInstallPublishesAndDeprecatesOlderMajor(t *testing.T) {
	ctx := context.Background()
	p, _ := newPublisher(t)
	install := func(version string, digest string) error {
		req, _ := json.Marshal(map[string]string{"biomeId": "acme", "version": version, "digestHash": digest})
		_, err := p.Install(ctx, req, "org-a", "user:alice")
		return err
	}
	v1, err := p.Submit(ctx, Submission{Manifest: biomeJSON("acme", "1.0.0", "acme:thing.read@1"),
		Contributions: []json.RawMessage{contribution("acme:thing.read@1", "Read", true)}}, "org-a")
	if err != nil {
		t.Fatal(err)
	}
	clientError(t, install("1.0.0", "sha256:stale"), fault.Conflict, "stale digest")
	if c, _ := p.Store.GetCapability(ctx, "acme:thing.read@1"); c.Lifecycle != store.LifecycleSeeded {
		t.Fatalf("a refused grant changed the lifecycle to %s", c.Lifecycle)
	}
	if err := install("1.0.0", v1.Digest.Hash); err != nil {
		t.Fatal(err)
	}
	v2, err := p.Submit(ctx, Submission{Manifest: biomeJSON("acme", "2.0.0", "acme:thing.read@1", "acme:thing.read@2"),
		Contributions: []json.RawMessage{contribution("acme:thing.read@1", "Read", true), contribution("acme:thing.read@2", "Read v2", true)}}, "org-a")
	if err != nil {
		t.Fatal(err)
	}
	if got := v2.Digest.Diff.Added; len(got) != 1 || got[0] != "acme:thing.read@2" {
		t.Fatalf("diff added %v, want [acme:thing.read@2]", got)
	}
	if err := install("2.0.0", v2.Digest.Hash); err != nil {
		t.Fatal(err)
	}
	old, _ := p.Store.GetCapability(ctx, "acme:thing.read@1")
	cur, _ := p.Store.GetCapability(ctx, "acme:thing.read@2")
	if old.Lifecycle != store.LifecycleDeprecated || old.ReplacedBy != "acme:thing.read@2" || cur.Lifecycle != store.LifecyclePublished {
		t.Fatalf("@1 %s replacedBy %q, @2 %s; want deprecated→@2 and published", old.Lifecycle, old.ReplacedBy, cur.Lifecycle)
	}
}

func TestTransition(t *testing.T) {
	ctx := context.Background()
	p, _ := newPublisher(t)
	_, err := p.Submit(ctx, Submission{Manifest: biomeJSON("acme", "1.0.0", "acme:thing.read@1", "acme:thing.read@2"),
		Contributions: []json.RawMessage{contribution("acme:thing.read@1", "Read", true), contribution("acme:thing.read@2", "Read 2", true)}}, "org-a")
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		tr      Transition
		kind    fault.Kind // Internal = succeeds
		message string
	}{
		{Transition{Ref: "acme:nope@1", To: "published"}, fault.NotFound, "no capability"},
		{Transition{Ref: "acme:thing.read@1", To: "deprecated"}, fault.Conflict, "cannot move to deprecated"},
		{Transition{Ref: "acme:thing.read@1", To: "published"}, fault.Internal, ""},
		{Transition{Ref: "acme:thing.read@1", To: "retired"}, fault.Invalid, "needs the successor"},
		{Transition{Ref: "acme:thing.read@1", To: "retired", ReplacedBy: "acme:gone@9"}, fault.Invalid, "no capability"},
		{Transition{Ref: "acme:thing.read@1", To: "retired", ReplacedBy: "acme:thing.read@2"}, fault.Internal, ""},
		{Transition{Ref: "acme:thing.read@1", To: "published"}, fault.Conflict, "cannot move"},
	}
	for i, s := range steps {
		_, err := p.Transition(ctx, s.tr, "org-a", "user:alice")
		if s.kind == fault.Internal {
			if err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			continue
		}
		clientError(t, err, s.kind, s.message)
	}
	c, _ := p.Store.GetCapability(ctx, "acme:thing.read@1")
	events, _ := p.Store.(store.Store).ListLifecycleEvents(ctx, "acme:thing.read@1")
	if c.Lifecycle != store.LifecycleRetired || c.ReplacedBy != "acme:thing.read@2" || len(events) != 2 || events[1].Actor != "user:alice" {
		t.Fatalf("capability %+v events %+v: want retired → @2 after 2 recorded transitions by user:alice", c, events)
	}
}

func TestSubmitRefusesAnMCPProviderID(t *testing.T) {
	ctx := context.Background()
	p, _ := newPublisher(t)
	srv := store.MCPServer{ProviderID: "acme", Transport: "stdio", Command: "true", TimeoutMs: 1000, Generation: 1, RegisteredBy: "user:alice"}
	bv := store.BiomeVersion{ID: "acme", Version: "1.0.1", Manifest: biomeJSON("acme", "1.0.1"), Contributions: json.RawMessage("[]"),
		ContentHash: "h", DigestHash: "d", Digest: json.RawMessage("{}")}
	if err := p.Store.(store.Store).SaveMCPServer(ctx, srv, bv, nil, nil); err != nil {
		t.Fatal(err)
	}
	_, err := p.Submit(ctx, Submission{Manifest: biomeJSON("acme", "2.0.0", "acme:thing.read@1"),
		Contributions: []json.RawMessage{contribution("acme:thing.read@1", "Read", true)}}, "org-a")
	clientError(t, err, fault.Conflict, "registered MCP server")
}
