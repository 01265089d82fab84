package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/policy/opatest"
	"github.com/xemahq/xema/internal/testnet"
)

// stockOPA is a running `opa run --server` that downloads its bundle from the gateway.
type stockOPA struct {
	URL  string
	logs *testnet.Output
}

// startStockOPA configures a stock OPA only through its documented configuration: a service
// at the gateway's /v1 with a bearer token, one bundle polled every second. It returns once
// OPA reports the bundle activated.
func startStockOPA(t *testing.T, g *gateway, token string) *stockOPA {
	t.Helper()
	config, err := json.Marshal(map[string]any{
		"services": map[string]any{"xema": map[string]any{
			"url":         g.URL + "/v1",
			"credentials": map[string]any{"bearer": map[string]any{"token": token}},
		}},
		"bundles": map[string]any{"xema": map[string]any{
			"service": "xema", "resource": "bundles/xema.tar.gz",
			"polling": map[string]any{"min_delay_seconds": 1, "max_delay_seconds": 1},
		}},
		"decision_logs": map[string]any{"console": false},
	})
	if err != nil {
		t.Fatal(err)
	}
	// A file, not --set: the token stays out of the process list.
	path := filepath.Join(t.TempDir(), "opa.json")
	if err := os.WriteFile(path, config, 0o600); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", testnet.FreePort(t))
	o := &stockOPA{URL: "http://" + addr, logs: &testnet.Output{}}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, opatest.Binary(t), "run", "--server", "--skip-version-check", "--log-level", "error", "--addr", addr, "--config-file", path)
	cmd.Stdout, cmd.Stderr = o.logs, o.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("opa output:\n%s", o.logs.String())
		}
	})
	o.waitFor(t, "the bundle to activate", func() bool {
		resp, err := http.Get(o.URL + "/health?bundles")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return o
}

func (o *stockOPA) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; opa output:\n%s", what, o.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// query evaluates a document of the loaded bundle.
func (o *stockOPA) query(t *testing.T, path string, input any, out any) {
	t.Helper()
	body, err := json.Marshal(map[string]any{"input": input})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(o.URL+"/v1/data/"+path, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var res struct {
		Result json.RawMessage `json:"result"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil || resp.StatusCode != http.StatusOK || res.Result == nil {
		t.Fatalf("stock OPA on %s: %s (%v), result %s", path, resp.Status, err, res.Result)
	}
	if err := json.Unmarshal(res.Result, out); err != nil {
		t.Fatal(err)
	}
}

// opaDecision is the part of data.xema.authz.decision the gateway's answer shows.
type opaDecision struct {
	Allow   bool `json:"allow"`
	Reasons []struct {
		Code string `json:"code"`
	} `json:"reasons"`
}

func (d opaDecision) codes() []string {
	var codes []string
	for _, r := range d.Reasons {
		codes = append(codes, r.Code)
	}
	return sortedSet(codes)
}

func (o *stockOPA) decide(t *testing.T, in map[string]any) opaDecision {
	t.Helper()
	var d opaDecision
	o.query(t, "xema/authz/decision", in, &d)
	return d
}

func (o *stockOPA) revision(t *testing.T) string {
	t.Helper()
	var rev string
	o.query(t, "xema/revision", map[string]any{}, &rev)
	return rev
}

func sortedSet(ss []string) []string {
	ss = slices.Clone(ss)
	slices.Sort(ss)
	return slices.Compact(ss)
}

// policyInputOf is the policy input internal/gateway's policyInput builds for a call with
// token: the verified claims mapped as the development issuer's mapping does (groups and
// roles default to [], no armed claim means ["*"], empty optional fields are left out).
func policyInputOf(t *testing.T, token, ref, resource string) map[string]any {
	t.Helper()
	_, claims := segments(t, token)
	sub, _ := claims["sub"].(string)
	kind, _, _ := strings.Cut(sub, ":")
	list := func(claim string, absent []any) []any {
		if v, ok := claims[claim].([]any); ok {
			return v
		}
		return absent
	}
	in := map[string]any{
		"ref":         ref,
		"subject":     map[string]any{"kind": kind, "ref": sub},
		"groups":      list("groups", []any{}),
		"roles":       list("roles", []any{}),
		"environment": claims["xema_env"],
		"armed":       list("xema_armed", []any{"*"}),
		"org":         "default", // the gateway's org of a token naming none
	}
	for claim, field := range map[string]string{"xema_org_role": "orgRole", "xema_org": "org", "xema_project": "project", "xema_session": "session"} {
		if v, _ := claims[claim].(string); v != "" {
			in[field] = v
		}
	}
	if resource != "" {
		in["resource"] = resource
	}
	return in
}

// decisionCase is one call, sent to the gateway and, as a policy input, to the stock OPA.
type decisionCase struct {
	name     string
	token    string
	ref      string
	input    map[string]any
	resource string // the input's x-xema-resource property, as the gateway extracts it
	allow    bool
	status   int    // the gateway's status when allowed (the policy admits, the handler answers)
	code     string // a reason code the denial must hold
}

// compare sends c to the gateway and to the stock OPA: both must allow, or both deny with
// the same set of reason codes, decided on the same bundle revision.
func compare(t *testing.T, g *gateway, o *stockOPA, admin string, c decisionCase) {
	t.Helper()
	r := g.post("/v1/capabilities/invoke", c.token, map[string]any{"ref": c.ref, "input": c.input})
	d := o.decide(t, policyInputOf(t, c.token, c.ref, c.resource))
	gwCodes := sortedSet(reasonCodes(r.Body))
	switch {
	case c.allow && r.Status != c.status:
		t.Errorf("gateway answered %d, want %d: %s", r.Status, c.status, r.Raw)
	case !c.allow && (r.Status != http.StatusForbidden || str(r.Body, "code") != "DENIED" || !slices.Contains(gwCodes, c.code)):
		t.Errorf("gateway answered %d %s, want 403 DENIED with %s", r.Status, r.Raw, c.code)
	}
	if d.Allow != c.allow || !slices.Equal(d.codes(), gwCodes) {
		t.Errorf("stock OPA: allow %v reasons %v; gateway: %d reasons %v", d.Allow, d.codes(), r.Status, gwCodes)
	}
	rec := g.get("/v1/audit/"+str(r.Body, "auditId"), admin)
	expect(t, rec, http.StatusOK)
	want := map[bool]string{true: "allowed", false: "denied"}[c.allow]
	if str(rec.Body, "decision") != want {
		t.Errorf("audit decision %q, want %q: %s", str(rec.Body, "decision"), want, rec.Raw)
	}
	if gwRev, opaRev := str(rec.Body, "policyRevision"), o.revision(t); gwRev != opaRev {
		t.Errorf("the gateway decided on revision %s, the stock OPA holds %s", gwRev, opaRev)
	}
}

// TestStockOPAEnforcesGatewayBundle runs a stock OPA on the bundle the gateway serves and
// checks that it decides every call as the gateway does, before and after grant and
// lifecycle changes made through the gateway.
func TestStockOPAEnforcesGatewayBundle(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the opa binary")
	}
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t), "--bundle-reader", "service:opa-sidecar")
		admin := g.adminToken()
		tok := func(args ...string) string { return g.token(args...) }
		agent := tok("--subject", "agent:support-bot", "--env", "project")
		member := tok("--subject", "user:bob", "--org-role", "org_member", "--env", "org")
		// The only subject the operator named with --bundle-reader.
		sidecar := tok("--subject", "service:opa-sidecar", "--env", "service")
		demoDigest := g.digestOf(admin, "demo", "1.0.0")

		t.Run("bundle route", func(t *testing.T) {
			for name, token := range map[string]string{"agent": agent, "member": member, "org admin": admin,
				"another service": tok("--subject", "service:billing", "--env", "service")} {
				if r := g.get("/v1/bundles/xema.tar.gz", token); r.Status != http.StatusForbidden || str(r.Body, "code") != "DENIED" {
					t.Errorf("%s fetched the bundle: %d %.200s", name, r.Status, r.Raw)
				}
			}
		})

		o := startStockOPA(t, g, sidecar)
		page := func(id string) map[string]any { return map[string]any{"pageId": id} }
		onboarding := map[string]any{"workflowId": "onboarding"}
		install := map[string]any{"biomeId": "demo", "version": "1.0.0", "digestHash": "sha256:" + strings.Repeat("0", 64)}
		cases := []decisionCase{
			{name: "agent reads a page in project", token: agent, ref: "kb:page.read@1", input: page("welcome"), resource: "welcome", allow: true, status: 200},
			{name: "agent armed kb:* reads a page", token: tok("--subject", "agent:support-bot", "--env", "project", "--armed", "kb:*"),
				ref: "kb:page.read@1", input: page("welcome"), resource: "welcome", allow: true, status: 200},
			{name: "agent starts a workflow in project", token: agent, ref: "workflow:run.start@1", input: onboarding, allow: true, status: 200},
			{name: "public session starts a workflow", token: tok("--subject", "agent:support-bot", "--env", "public-session"),
				ref: "workflow:run.start@1", input: onboarding, code: "ENVIRONMENT_NOT_ALLOWED"},
			{name: "agent armed kb:* starts a workflow", token: tok("--subject", "agent:support-bot", "--env", "project", "--armed", "kb:*"),
				ref: "workflow:run.start@1", input: onboarding, code: "NOT_ARMED"},
			{name: "member installs a biome", token: member, ref: "biome:install@1", input: install, code: "MISSING_GRANT"},
			// Admitted by the policy; the handler then refuses the stale digest.
			{name: "org admin installs a biome", token: admin, ref: "biome:install@1", input: install, allow: true, status: http.StatusConflict},
			{name: "agent moves a lifecycle", token: agent, ref: "capability:lifecycle.transition@1",
				input: map[string]any{"ref": "kb:page.read@1", "to": "deprecated"}, code: "NOT_SAFE_FOR_AGENTS"},
			{name: "member moves a lifecycle", token: member, ref: "capability:lifecycle.transition@1",
				input: map[string]any{"ref": "kb:page.read@1", "to": "deprecated"}, code: "MISSING_GRANT"},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) { compare(t, g, o, admin, c) })
		}

		t.Run("304 on the current ETag", func(t *testing.T) { testBundleETag(t, g, sidecar) })

		// A grant narrowed to the page "welcome": the stock OPA denies "faq" once it has polled.
		faq := decisionCase{name: "agent reads a page outside the grant's resources", token: agent, ref: "kb:page.read@1",
			input: page("faq"), resource: "faq", code: "RESOURCE_NOT_REACHABLE"}
		if d := o.decide(t, policyInputOf(t, agent, faq.ref, faq.resource)); !d.Allow {
			t.Fatalf("before the grant change the stock OPA already denies faq: %v", d.codes())
		}
		etag := g.get("/v1/bundles/xema.tar.gz", sidecar).Header.Get("ETag")
		grant := g.post("/v1/grants", admin, map[string]any{"biomeId": "demo", "version": "1.0.0", "digestHash": demoDigest,
			"customize": map[string]any{"kb:page.read@1": map[string]any{"resources": []string{"welcome"}}}})
		expect(t, grant, http.StatusCreated)
		start := time.Now()
		o.waitFor(t, "the narrowed grant", func() bool { return !o.decide(t, policyInputOf(t, agent, faq.ref, faq.resource)).Allow })
		t.Logf("%s: the stock OPA enforced the new grant %v after the gateway's 201", e.name, time.Since(start).Round(time.Millisecond))
		if r := bundleIfNoneMatch(t, g, sidecar, etag); r.Status != http.StatusOK {
			t.Errorf("the ETag from before the grant change answered %d", r.Status)
		}

		// A lifecycle transition: the retired ref is denied with its successor.
		retire := g.post("/v1/lifecycle", admin, map[string]any{"ref": "connector:channel.send-message@1", "to": "retired", "replacedBy": "kb:page.read@1"})
		expect(t, retire, http.StatusCreated)
		send := decisionCase{name: "agent sends with a retired ref", token: agent, ref: "connector:channel.send-message@1",
			input: map[string]any{"conversation": "c1", "text": "hi"}, code: "CAPABILITY_RETIRED"}
		start = time.Now()
		o.waitFor(t, "the retirement", func() bool {
			return slices.Contains(o.decide(t, policyInputOf(t, agent, send.ref, "")).codes(), "CAPABILITY_RETIRED")
		})
		t.Logf("%s: the stock OPA enforced the retirement %v after the gateway's 201", e.name, time.Since(start).Round(time.Millisecond))

		after := append(cases[:1:1], faq, send, cases[3], cases[5])
		for _, c := range after {
			t.Run("after changes: "+c.name, func(t *testing.T) { compare(t, g, o, admin, c) })
		}
	})
}

func bundleIfNoneMatch(t *testing.T, g *gateway, token, etag string) response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, g.URL+"/v1/bundles/xema.tar.gz", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("If-None-Match", etag)
	return g.do(req)
}

func testBundleETag(t *testing.T, g *gateway, admin string) {
	r := g.get("/v1/bundles/xema.tar.gz", admin)
	expect(t, r, http.StatusOK)
	etag := r.Header.Get("ETag")
	if len(etag) < 3 || strings.Count(etag, `"`) != 2 || etag[0] != '"' || etag[len(etag)-1] != '"' {
		t.Fatalf("ETag %q is not one quoted string", etag)
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/gzip" || len(r.Raw) == 0 {
		t.Errorf("bundle answer %q, %d bytes", ct, len(r.Raw))
	}
	nm := bundleIfNoneMatch(t, g, admin, etag)
	if nm.Status != http.StatusNotModified || len(nm.Raw) != 0 || nm.Header.Get("ETag") != etag {
		t.Errorf("If-None-Match %s: %d, ETag %q, %d bytes", etag, nm.Status, nm.Header.Get("ETag"), len(nm.Raw))
	}
	if r := bundleIfNoneMatch(t, g, admin, `"stale"`); r.Status != http.StatusOK {
		t.Errorf("a stale ETag answered %d", r.Status)
	}
}
