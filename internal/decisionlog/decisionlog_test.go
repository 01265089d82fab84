package decisionlog

import (
	"compress/gzip"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/store"
)

func record(id string) store.AuditRecord {
	return store.AuditRecord{ID: id, Org: "acme", Time: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), Ref: "kb:page.read@1",
		Decision: "denied", Reasons: json.RawMessage(`[{"code":"MISSING_GRANT","detail":"x"}]`), BundleRevision: "r7",
		PolicyInput: json.RawMessage(`{"ref":"kb:page.read@1","session":"s1","subject":{"kind":"agent","ref":"agent:a"}}`)}
}

func TestHTTPSinkReceivesGzippedBatches(t *testing.T) {
	var mu sync.Mutex
	var got []Event
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Content-Encoding") != "gzip" {
			t.Errorf("Content-Encoding %q", r.Header.Get("Content-Encoding"))
		}
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			t.Error(err)
			return
		}
		var batch []Event
		if err := json.NewDecoder(zr).Decode(&batch); err != nil {
			t.Error(err)
		}
		mu.Lock()
		got = append(got, batch...)
		mu.Unlock()
	}))
	defer srv.Close()
	e, err := New(Options{Sink: srv.URL, Mask: []string{"/input/session", "/input/subject/ref"}, BatchSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	outcome := record("inv_1.outcome")
	outcome.PolicyInput = nil // not a decision record
	e.Records([]store.AuditRecord{record("deny_1"), record("deny_2"), record("deny_3"), outcome})
	e.Close()
	if len(got) != 3 {
		t.Fatalf("received %d events, want the 3 decisions", len(got))
	}
	ev := got[0]
	in := ev.Input.(map[string]any)
	if ev.DecisionID != "deny_1" || ev.Path != Path || ev.Result.Allow || ev.Bundles["xema"].Revision != "r7" ||
		in["session"] != nil || in["subject"].(map[string]any)["ref"] != nil || len(ev.Erased) != 2 || ev.Xema.Org != "acme" {
		t.Fatalf("event %+v", ev)
	}
}

func TestFullBufferDropsAndCounts(t *testing.T) {
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-block }))
	defer srv.Close()
	e, err := New(Options{Sink: srv.URL, BatchSize: 1, Buffer: 2})
	if err != nil {
		t.Fatal(err)
	}
	rs := make([]store.AuditRecord, 50)
	for i := range rs {
		rs[i] = record("deny")
	}
	e.Records(rs) // never blocks, whatever the sink does
	if e.Dropped() < 47 {
		t.Fatalf("dropped %d of 50 with a buffer of 2 and one in flight", e.Dropped())
	}
	close(block)
	e.Close()
}

func TestOptionsChecked(t *testing.T) {
	for _, o := range []Options{{Sink: ""}, {Sink: "ftp://x"}, {Sink: "file:"}, {Sink: "stdout", Mask: []string{"/result"}}} {
		if _, err := New(o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

// TestMaskedEverywhere: a masked input value is erased from the input and replaced wherever
// else the event repeats it: reasons' details, suggestions, obligations, the other input
// fields, the gateway's org.
func TestMaskedEverywhere(t *testing.T) {
	e := &Exporter{opts: Options{Mask: []string{"/input/resource", "/input/subject", "/input/environment", "/input/org", "/input/groups"}}}
	rec := store.AuditRecord{ID: "deny_1", Org: "acme-corp", Time: time.Now(), Decision: "denied",
		PolicyInput: json.RawMessage(`{"ref":"kb:page.read@1","resource":"team-secret/plan","environment":"public-session",
			"org":"acme-corp","subject":{"kind":"agent","ref":"agent:spy"},"resourceOwner":"agent:spy","groups":["ops-9"],"n":4711}`),
		Reasons: json.RawMessage(`[{"code":"RESOURCE_NOT_REACHABLE","detail":"team-secret/plan is outside the resources granted"},
			{"code":"ENVIRONMENT_NOT_ALLOWED","detail":"public-session is not granted to agent:spy of acme-corp (group ops-9)"}]`),
		Suggestions: json.RawMessage(`[{"kind":"switch-environment","from":"public-session","to":"app"}]`),
		Obligations: json.RawMessage(`[{"kind":"rate-limit","key":"agent:spy"}]`)}
	ev, err := e.event(rec)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"team-secret", "public-session", "agent:spy", "acme-corp", "ops-9"} {
		if strings.Contains(string(raw), secret) {
			t.Errorf("the event still shows %q: %s", secret, raw)
		}
	}
	for _, kept := range []string{"RESOURCE_NOT_REACHABLE", "kb:page.read@1", `"to":"app"`, "4711", Masked} {
		if !strings.Contains(string(raw), kept) {
			t.Errorf("the event lost %q: %s", kept, raw)
		}
	}
	if len(ev.Erased) != 5 {
		t.Errorf("erased %v", ev.Erased)
	}
}
