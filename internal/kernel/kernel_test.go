package kernel

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

const fullDescriptor = `{"kind":"capability","manifest":{
	"ref":"test:thing.do@1","title":"Do a thing","summary":"Does it.","sideEffects":"None.",
	"inputSchema":{"type":"object"},"outputSchema":{"type":"object"},
	"riskTier":"low","requiresApproval":false}}`

func noop(context.Context, Call) (any, error) { return map[string]bool{"ok": true}, nil }

func TestScan(t *testing.T) {
	partial := strings.Replace(fullDescriptor, `"title":"Do a thing",`, "", 1)
	partial = strings.Replace(partial, `"riskTier":"low",`, "", 1)
	partial = strings.Replace(partial, "test:thing.do@1", "test:partial.do@1", 1)
	dup := strings.Replace(fullDescriptor, "Do a thing", "Do it again", 1)

	r := New()
	r.Register(Registration{Contribution: json.RawMessage(fullDescriptor), Handler: noop})
	r.Register(Registration{Contribution: json.RawMessage(partial), Handler: noop})
	r.Register(Registration{Contribution: json.RawMessage(dup), Handler: noop})
	r.Register(Registration{Contribution: json.RawMessage(strings.Replace(fullDescriptor, "thing.do", "nohandler.do", 1))})

	accepted, skipped := r.Scan()
	if len(accepted) != 1 || accepted[0].Contribution.Manifest.Ref != "test:thing.do@1" {
		t.Fatalf("accepted %+v, want only test:thing.do@1", accepted)
	}
	if _, ok := r.Handler("test:thing.do@1"); !ok {
		t.Fatal("accepted registration is not a live runner")
	}
	reasons := map[string]string{}
	for _, s := range skipped {
		reasons[s.Ref] = s.Reason
	}
	for ref, want := range map[string][]string{
		"test:partial.do@1":   {"title", "riskTier"},
		"test:thing.do@1":     {"already installed"},
		"test:nohandler.do@1": {"no handler"},
	} {
		for _, w := range want {
			if !strings.Contains(reasons[ref], w) {
				t.Errorf("skip reason of %s = %q, want it to name %q", ref, reasons[ref], w)
			}
		}
	}
	for _, ref := range []string{"test:partial.do@1", "test:nohandler.do@1"} {
		if _, ok := r.Handler(ref); ok {
			t.Errorf("%s was skipped but serves", ref)
		}
	}
	if again, _ := r.Scan(); len(again) != 0 {
		t.Fatalf("a second scan re-published %d registrations", len(again))
	}
}
