package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/store"
)

// testListAudit: one org's records only, newest first with ties broken by id, every filter
// alone and combined, and keyset pages that neither skip nor repeat a record.
func testListAudit(t *testing.T, s store.Store) {
	ctx := context.Background()
	var all []store.AuditRecord
	add := func(id, org string, at time.Time, subject, ref, decision, reason string) store.AuditRecord {
		r := store.AuditRecord{ID: id, Org: org, Time: at, SubjectKind: "user", SubjectRef: subject, Ref: ref, Decision: decision}
		if reason != "" {
			r.Reasons = json.RawMessage(fmt.Sprintf(`[{"code":"OTHER","detail":"x"},{"code":%q,"detail":"y"}]`, reason))
		}
		if err := s.AppendAudit(ctx, r); err != nil {
			t.Fatalf("AppendAudit(%s): %v", id, err)
		}
		got, err := s.GetAudit(ctx, id) // as stored (time stamped to the microsecond)
		if err != nil {
			t.Fatalf("GetAudit(%s): %v", id, err)
		}
		all = append(all, got)
		return got
	}
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	r1 := add("a-01", "acme", at(1), "user:alice", "kb:page.read@1", "allowed", "")
	r2 := add("a-02", "acme", at(2), "user:bob", "kb:page.read@1", "denied", "MISSING_GRANT")
	r3 := add("a-03", "acme", at(3), "user:alice", "kb:page.write@1", "denied", "ENVIRONMENT_NOT_ALLOWED")
	r4b := add("a-04b", "acme", at(4), "user:alice", "kb:page.write@1", "pending-approval", "")
	r4a := add("a-04a", "acme", at(4), "user:bob", "kb:page.read@1", "allowed", "")
	linked := store.AuditRecord{ID: "a-04a.outcome", Org: "acme", Time: at(4), Decision: "allowed", ParentID: "a-04a"}
	if err := s.AppendAudit(ctx, linked); err != nil {
		t.Fatalf("AppendAudit(a-04a.outcome): %v", err)
	}
	linked, _ = s.GetAudit(ctx, "a-04a.outcome")
	add("a-05", "globex", at(5), "user:alice", "kb:page.read@1", "denied", "MISSING_GRANT")
	add("a-06", "", at(6), "", "/v1/grants", "unauthenticated", "")
	// Reasons that are not an array never match a reason filter, nor break the query.
	odd := store.AuditRecord{ID: "a-07", Org: "acme", Time: at(0), Decision: "error", Reasons: json.RawMessage(`{"code":"MISSING_GRANT"}`)}
	if err := s.AppendAudit(ctx, odd); err != nil {
		t.Fatalf("AppendAudit(a-07): %v", err)
	}
	r7, _ := s.GetAudit(ctx, "a-07")

	ids := func(rs []store.AuditRecord) []string {
		out := []string{}
		for _, r := range rs {
			out = append(out, r.ID)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		f    store.AuditQuery
		want []store.AuditRecord
	}{
		{"org only", store.AuditQuery{Org: "acme"}, []store.AuditRecord{r4b, linked, r4a, r3, r2, r1, r7}},
		{"parent", store.AuditQuery{Org: "acme", ParentID: "a-04a"}, []store.AuditRecord{linked}},
		{"parent of another org", store.AuditQuery{Org: "globex", ParentID: "a-04a"}, nil},
		{"other org", store.AuditQuery{Org: "globex"}, []store.AuditRecord{all[5]}},
		{"no org", store.AuditQuery{Org: ""}, []store.AuditRecord{all[6]}},
		{"unknown org", store.AuditQuery{Org: "initech"}, nil},
		{"subject", store.AuditQuery{Org: "acme", SubjectRef: "user:alice"}, []store.AuditRecord{r4b, r3, r1}},
		{"ref", store.AuditQuery{Org: "acme", Ref: "kb:page.read@1"}, []store.AuditRecord{r4a, r2, r1}},
		{"decision", store.AuditQuery{Org: "acme", Decision: "denied"}, []store.AuditRecord{r3, r2}},
		{"reason", store.AuditQuery{Org: "acme", ReasonCode: "MISSING_GRANT"}, []store.AuditRecord{r2}},
		{"reason of another element", store.AuditQuery{Org: "acme", ReasonCode: "OTHER"}, []store.AuditRecord{r3, r2}},
		{"since inclusive", store.AuditQuery{Org: "acme", Since: at(3)}, []store.AuditRecord{r4b, linked, r4a, r3}},
		{"until exclusive", store.AuditQuery{Org: "acme", Until: at(2)}, []store.AuditRecord{r1, r7}},
		{"range", store.AuditQuery{Org: "acme", Since: at(2), Until: at(4)}, []store.AuditRecord{r3, r2}},
		{"combined", store.AuditQuery{Org: "acme", SubjectRef: "user:alice", Decision: "denied", Ref: "kb:page.write@1"}, []store.AuditRecord{r3}},
		{"omit a kind's allowed reads", store.AuditQuery{Org: "acme", Omit: &store.AuditOmit{SubjectKind: "user", Refs: []string{"kb:page.read@1", "x:y.z@1"}}},
			[]store.AuditRecord{r4b, linked, r3, r2, r7}},
		{"limit", store.AuditQuery{Org: "acme", Limit: 2}, []store.AuditRecord{r4b, linked}},
		{"before a tie", store.AuditQuery{Org: "acme", Before: &store.AuditPosition{Time: r4b.Time, ID: r4b.ID}}, []store.AuditRecord{linked, r4a, r3, r2, r1, r7}},
		{"before with filter", store.AuditQuery{Org: "acme", SubjectRef: "user:alice", Before: &store.AuditPosition{Time: r3.Time, ID: r3.ID}}, []store.AuditRecord{r1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.ListAudit(ctx, tc.f)
			if err != nil {
				t.Fatalf("ListAudit: %v", err)
			}
			equal(t, "ids", ids(got), ids(tc.want))
			if len(tc.want) > 0 {
				equal(t, "records", got, tc.want)
			}
		})
	}

	t.Run("pages", func(t *testing.T) {
		var seen []string
		var before *store.AuditPosition
		for page := 0; ; page++ {
			if page > 10 {
				t.Fatal("pagination does not end")
			}
			got, err := s.ListAudit(ctx, store.AuditQuery{Org: "acme", Limit: 2, Before: before})
			if err != nil {
				t.Fatalf("ListAudit: %v", err)
			}
			if len(got) == 0 {
				break
			}
			seen = append(seen, ids(got)...)
			last := got[len(got)-1]
			before = &store.AuditPosition{Time: last.Time, ID: last.ID}
		}
		equal(t, "paged ids", seen, []string{"a-04b", "a-04a.outcome", "a-04a", "a-03", "a-02", "a-01", "a-07"})
	})

	t.Run("cancelled", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := s.ListAudit(cctx, store.AuditQuery{Org: "acme"}); !errors.Is(err, context.Canceled) {
			t.Fatalf("ListAudit with a cancelled context = %v, want context.Canceled", err)
		}
	})
}
