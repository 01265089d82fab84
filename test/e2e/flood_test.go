package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// A flood of unauthenticated requests is all counted and audited, in a bounded number of
// aggregate rows; an authenticated caller's refusals stay one record each.
func TestFloodUnauthenticatedIsAggregated(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t))
		admin := g.adminToken()
		db := rawDB(t, g)
		count := func() int {
			var n int
			if err := db.QueryRow(`SELECT count(*) FROM audit_log WHERE decision = 'unauthenticated'`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		before := count()

		const n, clients = 600, 12
		var mu sync.Mutex
		ids := map[string]int{}
		var wg sync.WaitGroup
		for c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range n / clients {
					req, _ := http.NewRequest(http.MethodPost, g.URL+"/v1/capabilities/invoke",
						strings.NewReader(`{"ref":"kb:page.read@1","input":{"pageId":"welcome"}}`))
					req.Header.Set("Content-Type", "application/json")
					if (c+i)%2 == 0 {
						req.Header.Set("Authorization", "Bearer not-a-jwt")
					}
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Error(err)
						return
					}
					raw := make([]byte, 4096)
					m, _ := resp.Body.Read(raw)
					resp.Body.Close()
					id := between(string(raw[:m]), `"auditId":"`, `"`)
					if resp.StatusCode != http.StatusUnauthorized || id == "" {
						t.Errorf("flood answer %d %s", resp.StatusCode, raw[:m])
						return
					}
					mu.Lock()
					ids[id]++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		// Two reasons (missing_token, malformed) from one source on one route: two buckets
		// (four if the flood straddled an interval).
		if len(ids) < 2 || len(ids) > 4 {
			t.Fatalf("%d aggregate ids for %d attempts, want 2 to 4: %v", len(ids), n, ids)
		}
		// Every answered id resolves now, before the interval closed.
		for id := range ids {
			rec := g.get("/v1/audit/"+id, admin)
			expect(t, rec, http.StatusOK)
			ag, _ := rec.Body["aggregate"].(map[string]any)
			if str(rec.Body, "decision") != "unauthenticated" || ag == nil || str(ag, "source") != "127.0.0.1" {
				t.Fatalf("aggregate record %s", rec.Raw)
			}
		}

		// A graceful stop writes the open buckets' counts.
		g.stop()
		rows := count() - before
		if rows > 2*len(ids) {
			t.Errorf("the flood added %d rows for %d buckets, want at most %d", rows, len(ids), 2*len(ids))
		}
		var sum int
		q := `SELECT detail FROM audit_log WHERE decision = 'unauthenticated'`
		rs, err := db.Query(q)
		if err != nil {
			t.Fatal(err)
		}
		for rs.Next() {
			var detail string
			if err := rs.Scan(&detail); err != nil {
				t.Fatal(err)
			}
			var d struct {
				Aggregate struct {
					Count int `json:"count"`
				} `json:"aggregate"`
			}
			if err := json.Unmarshal([]byte(detail), &d); err != nil {
				t.Fatalf("detail %s: %v", detail, err)
			}
			sum += d.Aggregate.Count
		}
		rs.Close()
		if sum != n {
			t.Errorf("aggregate counts sum to %d, want the %d attempts", sum, n)
		}

		// After the restart, GET of an opening record reports its bucket's total.
		g.cmd = nil
		g.start()
		admin = g.adminToken()
		total := 0
		for id, answered := range ids {
			rec := g.get("/v1/audit/"+id, admin)
			expect(t, rec, http.StatusOK)
			ag, _ := rec.Body["aggregate"].(map[string]any)
			got, _ := ag["total"].(float64)
			if int(got) != answered {
				t.Errorf("aggregate %s reports total %v, %d attempts were answered with it", id, ag["total"], answered)
			}
			total += int(got)
		}
		if total != n {
			t.Errorf("totals sum to %d, want %d", total, n)
		}

		// An authenticated caller's refusals are one record each.
		public := g.token("--subject", "agent:support-bot", "--env", "public-session")
		seen := map[string]bool{}
		for range 5 {
			r := g.post("/v1/capabilities/invoke", public, map[string]any{"ref": "workflow:run.start@1", "input": map[string]any{"workflowId": "onboarding"}})
			expect(t, r, http.StatusForbidden)
			seen[str(r.Body, "auditId")] = true
		}
		if len(seen) != 5 {
			t.Errorf("5 denials of an authenticated caller got %d audit ids", len(seen))
		}
	})
}

// between is the text of s after the first prefix up to the next suffix ("" if absent).
func between(s, prefix, suffix string) string {
	_, after, ok := strings.Cut(s, prefix)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(after, suffix)
	return v
}
