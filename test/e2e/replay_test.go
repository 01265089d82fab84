package e2e

import (
	"database/sql"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx", to tamper behind the gateway's back
	_ "modernc.org/sqlite"             // database/sql driver "sqlite"
)

// storeArgs names the gateway's store for a CLI command reading it directly.
func (g *gateway) storeArgs() []string {
	if g.Store != "" { // the data dir holds the master key the store's keys are wrapped with
		return []string{"--store", g.Store, "--data-dir", g.DataDir}
	}
	return []string{"--data-dir", g.DataDir}
}

// cli runs the xema CLI and returns its stdout and exit code (failing on anything but an exit).
func (g *gateway) cli(t *testing.T, args ...string) (string, int) {
	t.Helper()
	return g.cliInput(t, "", args...)
}

// cliInput is cli with stdin reading input (a person's answers).
func (g *gateway) cliInput(t *testing.T, input string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(g.bin, args...)
	cmd.Stdin = strings.NewReader(input)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return out.String() + errb.String(), ee.ExitCode()
	}
	if err != nil {
		t.Fatalf("xema %v: %v", args, err)
	}
	return out.String(), 0
}

// TestReplay records calls, then replays them with a candidate policy that denies one ref:
// exactly the recorded allowed calls of that ref change, nothing is written.
func TestReplay(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t))
		prov := newProvider(t)
		admin := g.adminToken()
		g.install(admin, biomeDir(t, "ticketing", prov.URL))
		bot := g.token("--subject", "agent:support-bot", "--env", "project")
		public := g.token("--subject", "agent:support-bot", "--env", "public-session")
		for range 3 {
			expect(t, g.post("/v1/capabilities/invoke", bot, findCall()), http.StatusOK)
		}
		expect(t, g.post("/v1/capabilities/invoke", bot, map[string]any{"ref": "kb:page.read@1", "input": map[string]any{"pageId": "welcome"}}), http.StatusOK)
		expect(t, g.post("/v1/capabilities/invoke", public, findCall()), http.StatusForbidden)
		expect(t, g.post("/v1/capabilities/invoke", bot, map[string]any{"ref": "ticket:nothing@1", "input": map[string]any{}}), http.StatusNotFound)

		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "nofind.rego"), []byte(`package xema.custom

deny contains {"code": "FIND_FROZEN", "detail": "ticket search is frozen"} if input.ref == "ticket:find@1"
`), 0o644); err != nil {
			t.Fatal(err)
		}
		before := prov.count()
		out, code := g.cli(t, append([]string{"replay", "--since", "1h", "--policy-dir", dir, "--format", "json"}, g.storeArgs()...)...)
		if code != 0 {
			t.Fatalf("replay exit %d: %s", code, out)
		}
		var rep struct {
			Considered, AllowToDeny, DenyToAllow int
			Changes                              []struct {
				AuditID, Ref string
				Before       struct{ Allow bool }
				After        struct {
					Allow   bool
					Reasons []string
				}
			}
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("replay output: %v\n%s", err, out)
		}
		// 3 finds + 1 page read + 1 denied find + the admin's submit and grant; the unknown ref is never considered.
		if rep.AllowToDeny != 3 || rep.DenyToAllow != 0 || len(rep.Changes) != 4 || rep.Considered != 7 {
			t.Fatalf("replay: considered %d, allow→deny %d, deny→allow %d, %d changes; want 7, 3, 0, 4 (the denied find gains a reason)\n%s",
				rep.Considered, rep.AllowToDeny, rep.DenyToAllow, len(rep.Changes), out)
		}
		for _, c := range rep.Changes {
			if c.Ref != "ticket:find@1" || c.After.Allow || !strings.Contains(strings.Join(c.After.Reasons, ","), "FIND_FROZEN") {
				t.Errorf("change %+v: want only ticket:find@1 calls, denied FIND_FROZEN", c)
			}
		}
		if prov.count() != before {
			t.Fatal("replay ran a call")
		}
		text, code := g.cli(t, append([]string{"replay", "--since", "1h", "--policy-dir", dir}, g.storeArgs()...)...)
		if code != 0 || !strings.Contains(text, "3 allow→deny") || !strings.Contains(text, "ticket:find@1  FIND_FROZEN") {
			t.Fatalf("replay text (exit %d):\n%s", code, text)
		}
		// The serving policy, replayed, changes nothing.
		same, code := g.cli(t, append([]string{"replay", "--since", "1h", "--format", "json"}, g.storeArgs()...)...)
		if code != 0 || !strings.Contains(same, `"allowToDeny": 0`) || !strings.Contains(same, `"changes": []`) {
			t.Fatalf("replay of the serving policy (exit %d): %s", code, same)
		}
		for _, bad := range [][]string{{"replay"}, {"replay", "--since", "1h", "--format", "xml"}, {"replay", "--since", "1h", "--bundle", "/nonexistent.tar.gz"}} {
			if msg, code := g.cli(t, append(bad, g.storeArgs()...)...); code != 2 {
				t.Errorf("xema %v: exit %d, want 2: %s", bad, code, msg)
			}
		}
	})
}

// TestAuditVerify: an intact log verifies; an UPDATE, a DELETE and an INSERT made behind the
// gateway's back with the append-only triggers dropped are each found and named.
func TestAuditVerify(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		dsn := e.store(t)
		g := startGateway(t, dsn)
		bot := g.token("--subject", "agent:support-bot", "--env", "project")
		var ids []string
		for range 6 {
			r := g.post("/v1/capabilities/invoke", bot, map[string]any{"ref": "kb:page.read@1", "input": map[string]any{"pageId": "welcome"}})
			expect(t, r, http.StatusOK)
			ids = append(ids, str(r.Body, "auditId"))
		}
		verify := func() (string, int) {
			return g.cli(t, append([]string{"audit", "verify"}, g.storeArgs()...)...)
		}
		if out, code := verify(); code != 0 || !strings.Contains(out, "intact") {
			t.Fatalf("intact log: exit %d: %s", code, out)
		}
		g.stop()

		db := openStoreDB(t, g)
		tamper := func(stmts ...string) {
			t.Helper()
			for _, s := range stmts {
				if _, err := db.Exec(s); err != nil {
					t.Fatalf("%s: %v", s, err)
				}
			}
		}
		if dsn == "" {
			tamper(`DROP TRIGGER audit_log_no_update`, `DROP TRIGGER audit_log_no_delete`, `DROP TRIGGER audit_log_no_replace`)
		} else {
			tamper(`ALTER TABLE audit_log DISABLE TRIGGER USER`)
		}
		broken := func(what, names string) {
			t.Helper()
			if out, code := verify(); code != 1 || !strings.Contains(out, names) {
				t.Fatalf("after the %s: exit %d, want 1 naming %s:\n%s", what, code, names, out)
			}
		}
		intact := func(what string) {
			t.Helper()
			if out, code := verify(); code != 0 {
				t.Fatalf("after undoing the %s: exit %d, want 0:\n%s", what, code, out)
			}
		}
		tamper(`UPDATE audit_log SET decision = 'denied' WHERE id = '` + ids[1] + `'`)
		broken("update", ids[1])
		tamper(`UPDATE audit_log SET decision = 'allowed' WHERE id = '` + ids[1] + `'`)
		intact("update")
		tamper(`INSERT INTO audit_log (id, time, ref, subject_kind, subject_ref, environment, decision, bundle_revision,
			input_hash, runner, outcome, latency_micros, parent_id, org) SELECT 'inv_forged', time, ref, subject_kind, subject_ref,
			environment, decision, bundle_revision, input_hash, runner, outcome, latency_micros, parent_id, org
			FROM audit_log WHERE id = '` + ids[4] + `'`)
		broken("insert", "inv_forged")
		tamper(`DELETE FROM audit_log WHERE id = 'inv_forged'`)
		intact("insert")
		tamper(`DELETE FROM audit_log WHERE id = '` + ids[5] + `.outcome'`)
		broken("delete at the end", "records at its end were deleted")
		tamper(`DELETE FROM audit_log WHERE id = '` + ids[1] + `.outcome'`)
		broken("delete in the middle", "expected seq")
	})
}

// openStoreDB opens the gateway's store with database/sql, as someone with database access.
func openStoreDB(t *testing.T, g *gateway) *sql.DB {
	t.Helper()
	driver, dsn := "pgx", g.Store
	if g.Store == "" {
		driver, dsn = "sqlite", filepath.Join(g.DataDir, "xema.db")
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestGrantDryRun: a narrowing grant, dry-run, counts exactly the recorded calls it would
// deny and records nothing.
func TestGrantDryRun(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t))
		prov := newProvider(t)
		admin := g.adminToken()
		sub := g.install(admin, biomeDir(t, "ticketing", prov.URL))
		bot := g.token("--subject", "agent:support-bot", "--env", "project")
		other := g.token("--subject", "agent:other", "--env", "project")
		for range 3 {
			expect(t, g.post("/v1/capabilities/invoke", bot, findCall()), http.StatusOK)
		}
		expect(t, g.post("/v1/capabilities/invoke", other, findCall()), http.StatusOK)
		grantsBefore := g.get("/v1/grants", admin)
		expect(t, grantsBefore, http.StatusOK)

		body := map[string]any{"biomeId": str(sub.Body, "biomeId"), "version": str(sub.Body, "version"),
			"digestHash": str(sub.Body, "digest.hash"), "customize": map[string]any{"ticket:find@1": map[string]any{"subjects": []string{"agent:other"}}}}
		dry := g.post("/v1/grants?dryRun=true&since=1h", admin, body)
		expect(t, dry, http.StatusOK)
		imp, _ := dry.Body["impact"].(map[string]any)
		if imp == nil || imp["allowToDeny"] != float64(3) || imp["denyToAllow"] != float64(0) || imp["considered"].(float64) < 4 ||
			dry.Body["dryRun"] != true || str(dry.Body, "grantId") == "" {
			t.Fatalf("dry run: %s; want allowToDeny 3 (support-bot's finds), denyToAllow 0", dry.Raw)
		}
		// Nothing changed: the same grants, and the bot is still served.
		grantsAfter := g.get("/v1/grants", admin)
		if string(grantsAfter.Raw) != string(grantsBefore.Raw) {
			t.Fatalf("a dry run recorded a grant:\nbefore %s\nafter  %s", grantsBefore.Raw, grantsAfter.Raw)
		}
		expect(t, g.post("/v1/capabilities/invoke", bot, findCall()), http.StatusOK)

		for _, q := range []string{"?dryRun=yes", "?since=1h", "?dryRun=true&since=forever", "?dryRun=true&since=9000h", "?dryRun=true&x=1"} {
			if r := g.post("/v1/grants"+q, admin, body); r.Status != http.StatusBadRequest {
				t.Errorf("POST /v1/grants%s: %d %s, want 400", q, r.Status, r.Raw)
			}
		}
		// The real grant then denies exactly those calls.
		expect(t, g.post("/v1/grants", admin, body), http.StatusCreated)
		expect(t, g.post("/v1/capabilities/invoke", bot, findCall()), http.StatusForbidden)
	})
}

// TestDecisionLogExport: every decision is shipped as one OPA decision-log event with the
// gateway's reasons, masked fields erased.
func TestDecisionLogExport(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		logFile := filepath.Join(t.TempDir(), "decisions.jsonl")
		g := startGateway(t, e.store(t), "--decision-log", "file:"+logFile, "--decision-log-mask", "/input/session")
		bot := g.token("--subject", "agent:support-bot", "--env", "project", "--session", "s-secret-42")
		public := g.token("--subject", "agent:support-bot", "--env", "public-session", "--session", "s-secret-42")
		ok := g.post("/v1/capabilities/invoke", bot, map[string]any{"ref": "kb:page.read@1", "input": map[string]any{"pageId": "welcome"}})
		expect(t, ok, http.StatusOK)
		den := g.post("/v1/capabilities/invoke", public, map[string]any{"ref": "workflow:run.start@1", "input": map[string]any{"workflowId": "onboarding"}})
		expect(t, den, http.StatusForbidden)
		g.stop() // the exporter ships what is queued before exit

		raw, err := os.ReadFile(logFile)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(raw), "s-secret-42") {
			t.Fatalf("a masked field was shipped:\n%s", raw)
		}
		events := map[string]map[string]any{}
		for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			var ev map[string]any
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				t.Fatalf("line %q: %v", line, err)
			}
			events[str(ev, "decision_id")] = ev
		}
		for id, allow := range map[string]bool{str(ok.Body, "auditId"): true, str(den.Body, "auditId"): false} {
			ev := events[id]
			if ev == nil || str(ev, "path") != "xema/authz/decision" || str(ev, "input.environment") == "" ||
				str(ev, "bundles.xema.revision") == "" || ev["result"].(map[string]any)["allow"] != allow || str(ev, "timestamp") == "" {
				t.Fatalf("event of %s: %v (all: %s)", id, ev, raw)
			}
		}
		if !strings.Contains(string(raw), "AUDIENCE_INCOMPATIBLE") || !strings.Contains(string(raw), `"erased":["/input/session"]`) {
			t.Errorf("the denial's reasons or the erased list are missing:\n%s", raw)
		}
	})
}

// TestReplayPolicyVersions: a --policy-dir reload with a changed rule decides under a new
// revision, which the audit records carry; replaying the window against each version's
// Rego names the candidate's revision and the recorded revisions, and lists exactly the
// calls the other version decided, each with the revision that decided it.
func TestReplayPolicyVersions(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		rule := func(ref, code string) string {
			return "package xema.custom\n\ndeny contains {\"code\": \"" + code + "\", \"detail\": \"frozen\"} if input.ref == \"" + ref + "\"\n"
		}
		v1, v2 := rule("kb:page.read@1", "KB_FROZEN"), rule("workflow:run.start@1", "RUNS_FROZEN")
		// Written beside and renamed into place: the poll never sees a half-written file.
		write := func(dir, src string) {
			t.Helper()
			tmp := filepath.Join(dir, ".freeze.tmp")
			if err := os.WriteFile(tmp, []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, filepath.Join(dir, "freeze.rego")); err != nil {
				t.Fatal(err)
			}
		}
		serving, cand1, cand2 := t.TempDir(), t.TempDir(), t.TempDir()
		write(serving, v1)
		write(cand1, v1)
		write(cand2, v2)
		g := startGateway(t, e.store(t), "--policy-dir", serving, "--policy-dir-poll", "50ms", "--metrics-reader", "user:alice")
		bot := g.token("--subject", "agent:support-bot", "--env", "project")
		read := map[string]any{"ref": "kb:page.read@1", "input": map[string]any{"pageId": "welcome"}}
		run := map[string]any{"ref": "workflow:run.start@1", "input": map[string]any{"workflowId": "onboarding"}}
		expect(t, g.post("/v1/capabilities/invoke", bot, read), http.StatusForbidden)
		expect(t, g.post("/v1/capabilities/invoke", bot, run), http.StatusOK)
		write(serving, v2)
		waitFor(t, "the changed rule serves", http.StatusOK, func() response { return g.post("/v1/capabilities/invoke", bot, read) })
		expect(t, g.post("/v1/capabilities/invoke", bot, run), http.StatusForbidden)

		// The start log named the directory and its file; the reload was counted.
		admin := g.adminToken()
		if logs := g.logs.String(); !strings.Contains(logs, "policy-dir="+serving) || !strings.Contains(logs, "policy-files=[freeze.rego]") {
			t.Errorf("the start log does not name the policy dir and its file:\n%s", logs)
		}
		if m := g.get("/metrics", admin); m.Status != http.StatusOK || !strings.Contains(string(m.Raw), `xema_policy_reloads_total{result="ok"} 1`) {
			t.Errorf("metrics: %d, want one ok reload counted:\n%s", m.Status, m.Raw)
		}

		// Two revisions in the audit log, the data's the same, the platform Rego's hash not.
		revs := map[string]bool{}
		page := g.get("/v1/audit?limit=100", admin)
		expect(t, page, http.StatusOK)
		recs, _ := page.Body["records"].([]any)
		for _, r := range recs {
			if rev, _ := r.(map[string]any)["policyRevision"].(string); rev != "" {
				revs[rev] = true
			}
		}
		if len(revs) != 2 {
			t.Fatalf("want the calls under two policy revisions, got %v", revs)
		}

		type report struct {
			Candidate string `json:"candidateRevision"`
			Revisions []struct {
				Revision            string
				Considered, Changed int
			}
			Changes []struct {
				Ref, Revision string
				Before, After struct {
					Allow   bool
					Reasons []string
				}
			}
		}
		replay := func(dir string) report {
			t.Helper()
			out, code := g.cli(t, append([]string{"replay", "--since", "1h", "--policy-dir", dir, "--format", "json"}, g.storeArgs()...)...)
			if code != 0 {
				t.Fatalf("replay exit %d: %s", code, out)
			}
			var rep report
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("replay output: %v\n%s", err, out)
			}
			if !revs[rep.Candidate] || len(rep.Revisions) != 2 {
				t.Fatalf("replay against %s: candidate %q, recorded %v; want one of %v and both\n%s", dir, rep.Candidate, rep.Revisions, revs, out)
			}
			return rep
		}
		r1, r2 := replay(cand1), replay(cand2)
		if r1.Candidate == r2.Candidate {
			t.Fatalf("both versions replay as revision %s", r1.Candidate)
		}
		// Against each version, exactly the calls the other decided differently change: the
		// read and the run, recorded under the other revision, with the differing decision.
		for _, c := range []struct {
			rep            report
			frozen, thawed string
			code           string
		}{{r1, "kb:page.read@1", "workflow:run.start@1", "KB_FROZEN"}, {r2, "workflow:run.start@1", "kb:page.read@1", "RUNS_FROZEN"}} {
			for _, rc := range c.rep.Revisions {
				if rc.Revision == c.rep.Candidate && rc.Changed != 0 {
					t.Errorf("replay against %s changes %d of its own decisions", c.rep.Candidate, rc.Changed)
				}
			}
			byRef := map[string]int{}
			for _, ch := range c.rep.Changes {
				byRef[ch.Ref]++
				if ch.Revision == c.rep.Candidate || !revs[ch.Revision] {
					t.Errorf("change %+v: recorded under %s, the candidate's own revision (or an unknown one)", ch, ch.Revision)
				}
				switch ch.Ref {
				case c.frozen:
					if !ch.Before.Allow || ch.After.Allow || !slices.Equal(ch.After.Reasons, []string{c.code}) {
						t.Errorf("against %s, %s: %+v; want allowed → denied %s", c.rep.Candidate, ch.Ref, ch, c.code)
					}
				case c.thawed:
					if ch.Before.Allow || !ch.After.Allow {
						t.Errorf("against %s, %s: %+v; want denied → allowed", c.rep.Candidate, ch.Ref, ch)
					}
				default:
					t.Errorf("unexpected change %+v", ch)
				}
			}
			// The frozen ref was called once under the other version (the waits polled the
			// thawed one until the reload).
			if byRef[c.frozen] != 1 || byRef[c.thawed] < 1 {
				t.Errorf("replay against %s: changes by ref %v, want one %s and the %s calls", c.rep.Candidate, byRef, c.frozen, c.thawed)
			}
		}
		text, code := g.cli(t, append([]string{"replay", "--since", "1h", "--policy-dir", cand1}, g.storeArgs()...)...)
		if code != 0 || !strings.Contains(text, "candidate policy revision "+r1.Candidate) || !strings.Contains(text, "recorded under revision "+r2.Candidate) {
			t.Fatalf("replay text (exit %d):\n%s", code, text)
		}
	})
}
