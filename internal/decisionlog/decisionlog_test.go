package decisionlog

import (
	"compress/gzip"
	"encoding/json"
	"net/http"
	"net/http/httptest"
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
