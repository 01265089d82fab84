package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/xemahq/xema/schemas"
)

const openAPIURL = "https://xema.dev/openapi.json"

// openAPIDoc is the served document, compiled for validation: each answer is validated
// against the schema the document names for its path, method, status and media type.
type openAPIDoc struct {
	t     *testing.T
	doc   map[string]any
	comp  *jsonschema.Compiler
	cache map[string]*jsonschema.Schema
	seen  map[string]bool // "METHOD path" validated
}

func loadOpenAPI(t *testing.T, raw []byte) *openAPIDoc {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	if err := c.AddResource(openAPIURL, doc); err != nil {
		t.Fatal(err)
	}
	for name, id := range schemas.IDs {
		data, _ := fs.ReadFile(schemas.FS, name)
		s, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.AddResource(id, s); err != nil {
			t.Fatal(err)
		}
	}
	m, _ := doc.(map[string]any)
	return &openAPIDoc{t: t, doc: m, comp: c, cache: map[string]*jsonschema.Schema{}, seen: map[string]bool{}}
}

func pointerEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// check validates one real answer of METHOD path (a documented path template).
func (d *openAPIDoc) check(method, path string, r response) {
	t := d.t
	t.Helper()
	paths, _ := d.doc["paths"].(map[string]any)
	ops, _ := paths[path].(map[string]any)
	op, _ := ops[strings.ToLower(method)].(map[string]any)
	if op == nil {
		t.Errorf("%s %s: not documented", method, path)
		return
	}
	d.seen[method+" "+path] = true
	resps, _ := op["responses"].(map[string]any)
	resp, _ := resps[fmt.Sprint(r.Status)].(map[string]any)
	if resp == nil {
		t.Errorf("%s %s answered %d, which the document does not name; body %s", method, path, r.Status, r.Raw)
		return
	}
	content, _ := resp["content"].(map[string]any)
	if content == nil {
		if len(bytes.TrimSpace(r.Raw)) > 0 && r.Status != http.StatusMovedPermanently {
			t.Errorf("%s %s %d: documented without a body, answered %q", method, path, r.Status, r.Raw)
		}
		return
	}
	ct := r.Header.Get("Content-Type")
	var mediaType string
	for mt := range content {
		mediaType = mt // one media type per documented answer
	}
	if !strings.HasSuffix(mediaType, "json") {
		if !strings.HasPrefix(ct, mediaType) {
			t.Errorf("%s %s %d: Content-Type %q, documented %s", method, path, r.Status, ct, mediaType)
		}
		return
	}
	body := r.Raw
	if mediaType == "application/json" && strings.HasPrefix(ct, "text/event-stream") { // MCP answers one JSON-RPC message as an event
		sc := bufio.NewScanner(bytes.NewReader(r.Raw))
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				body = []byte(data)
			}
		}
	} else if !strings.HasPrefix(ct, mediaType) {
		t.Errorf("%s %s %d: Content-Type %q, documented %s; body %s", method, path, r.Status, ct, mediaType, r.Raw)
		return
	}
	loc := openAPIURL + "#/paths/" + pointerEscape(path) + "/" + strings.ToLower(method) + "/responses/" + fmt.Sprint(r.Status) + "/content/" + pointerEscape(mediaType) + "/schema"
	sch := d.cache[loc]
	if sch == nil {
		var err error
		if sch, err = d.comp.Compile(loc); err != nil {
			t.Fatalf("compile %s: %v", loc, err)
		}
		d.cache[loc] = sch
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		t.Errorf("%s %s %d: not JSON: %s", method, path, r.Status, body)
		return
	}
	if err := sch.Validate(v); err != nil {
		t.Errorf("%s %s %d: the answer does not match the documented schema: %v\nbody: %s", method, path, r.Status, err, body)
	}
}

func (g *gateway) send(method, path, token string, body any) response {
	g.t.Helper()
	var rd *bytes.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, _ := http.NewRequest(method, g.URL+path, rd)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return g.do(req)
}

// TestOpenAPI fetches GET /openapi.json and validates the real answers (status and body) of a
// representative call per documented route against the schemas it names, on both engines;
// every documented route is called.
func TestOpenAPI(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t))
		served := g.get("/openapi.json", "")
		expect(t, served, http.StatusOK)
		if !bytes.Equal(served.Raw, schemas.OpenAPI) {
			t.Fatal("GET /openapi.json is not schemas/openapi.json")
		}
		d := loadOpenAPI(t, served.Raw)
		admin := g.adminToken()
		agent := g.token("--subject", "agent:support-bot", "--env", "project")
		public := g.token("--subject", "agent:support-bot", "--env", "public-session")
		prov := newProvider(t)
		dir := biomeDir(t, "ticketing", prov.URL)
		check := func(method, path string, r response) { t.Helper(); d.check(method, path, r) }

		check("GET", "/metrics", g.get("/metrics", agent)) // 403: not a --metrics-reader
		for _, p := range []string{"/healthz", "/readyz", "/metrics", "/openapi.json", "/.well-known/oauth-protected-resource",
			"/.well-known/oauth-protected-resource/mcp", "/.well-known/jwks.json", "/console", "/favicon.ico"} {
			check("GET", p, g.get(p, ""))
		}
		check("GET", "/console/{path}", g.get("/console/audit", ""))
		check("POST", "/console/token", g.post("/console/token", "", map[string]any{})) // 404: no --console-client-id
		check("GET", "/v1/profiles", g.get("/v1/profiles", agent))
		unauth := g.post("/v1/capabilities/search", "", map[string]any{})
		check("POST", "/v1/capabilities/search", unauth)

		// MCP: initialize over streamable HTTP; the stateless endpoint has no GET stream.
		init := map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": map[string]any{
			"protocolVersion": "2025-06-18", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "e2e", "version": "1"}}}
		raw, _ := json.Marshal(init)
		req, _ := http.NewRequest(http.MethodPost, g.URL+"/mcp", bytes.NewReader(raw))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+agent)
		check("POST", "/mcp", g.do(req))
		check("GET", "/mcp", g.get("/mcp", agent))
		check("DELETE", "/mcp", g.send("DELETE", "/mcp", agent, nil))

		// Biomes and grants.
		sub := g.post("/v1/biomes", admin, submission(t, dir))
		check("POST", "/v1/biomes", sub)
		expect(t, sub, http.StatusCreated)
		id, version, digest := str(sub.Body, "biomeId"), str(sub.Body, "version"), str(sub.Body, "digest.hash")
		bad := submission(t, dir)
		bad["manifest"] = map[string]any{"id": "x"}
		check("POST", "/v1/biomes", g.post("/v1/biomes", admin, bad))
		check("GET", "/v1/biomes", g.get("/v1/biomes", admin))
		check("GET", "/v1/biomes/{id}/{version}", g.get("/v1/biomes/"+id+"/"+version, admin))
		grantBody := map[string]any{"biomeId": id, "version": version, "digestHash": digest}
		dry := g.post("/v1/grants?dryRun=true&since=24h", admin, grantBody)
		expect(t, dry, http.StatusOK)
		check("POST", "/v1/grants", dry)
		gr := g.post("/v1/grants", admin, map[string]any{"biomeId": id, "version": version, "digestHash": digest,
			"customize": map[string]any{commentRef: map[string]any{"requiresApproval": true}}})
		expect(t, gr, http.StatusCreated)
		check("POST", "/v1/grants", gr)
		check("GET", "/v1/grants", g.get("/v1/grants", admin))

		// The funnel and the meta-tools.
		inv := g.post("/v1/capabilities/invoke", agent, map[string]any{"ref": "kb:page.read@1", "input": map[string]any{"pageId": "welcome"}})
		expect(t, inv, http.StatusOK)
		check("POST", "/v1/capabilities/invoke", inv)
		denied := g.post("/v1/capabilities/invoke", public, map[string]any{"ref": "kb:page.read@1", "input": map[string]any{"pageId": "welcome"}})
		check("POST", "/v1/capabilities/invoke", denied)
		check("POST", "/v1/capabilities/invoke", g.post("/v1/capabilities/invoke", agent, map[string]any{"ref": "kb:page.read@1", "input": map[string]any{"nope": 1}}))
		check("POST", "/v1/capabilities/search", g.post("/v1/capabilities/search", agent, map[string]any{"query": "ticket"}))
		check("POST", "/v1/capabilities/describe", g.post("/v1/capabilities/describe", agent, map[string]any{"refs": []string{"kb:page.read@1"}}))
		check("POST", "/v1/capabilities/plan", g.post("/v1/capabilities/plan", agent, map[string]any{"goalCapabilityRef": commentRef, "fromResourceTypes": []string{}}))
		check("POST", "/v1/capabilities/preflight", g.post("/v1/capabilities/preflight", agent, map[string]any{"ref": commentRef}))
		check("POST", "/v1/capabilities/explain", g.post("/v1/capabilities/explain", public, map[string]any{"capabilityRef": "kb:page.read@1", "denialCode": "ENVIRONMENT_NOT_ALLOWED"}))

		// Audit.
		check("GET", "/v1/audit", g.get("/v1/audit?limit=5", admin))
		check("GET", "/v1/audit/{id}", g.get("/v1/audit/"+str(inv.Body, "auditId"), agent))
		check("GET", "/v1/audit/{id}/why-denied", g.get("/v1/audit/"+str(denied.Body, "auditId")+"/why-denied", public))

		// Approvals: two held calls, one approved, one rejected.
		held := g.post("/v1/capabilities/invoke", agent, commentCall())
		check("POST", "/v1/capabilities/invoke", held)
		held2 := g.post("/v1/capabilities/invoke", agent, commentCall())
		check("GET", "/v1/approvals", g.get("/v1/approvals?status=pending", admin))
		check("GET", "/v1/invocations/{id}", g.get("/v1/invocations/"+str(held.Body, "approvalId"), agent))
		check("POST", "/v1/approvals/{id}/approve", g.post("/v1/approvals/"+str(held.Body, "approvalId")+"/approve", admin, map[string]any{}))
		check("POST", "/v1/approvals/{id}/reject", g.post("/v1/approvals/"+str(held2.Body, "approvalId")+"/reject", admin, map[string]any{"reason": "not now"}))
		check("POST", "/v1/approvals/{id}/approve", g.post("/v1/approvals/"+str(held2.Body, "approvalId")+"/approve", admin, map[string]any{}))

		// Lifecycle: deprecate the comment capability.
		check("POST", "/v1/lifecycle", g.post("/v1/lifecycle", admin, map[string]any{"ref": commentRef, "to": "deprecated"}))

		// Credentials and bindings.
		cred := g.post("/v1/credentials", admin, map[string]any{"name": "ci", "provider": "gitea", "secret": "s3cr3t-token"})
		check("POST", "/v1/credentials", cred)
		check("GET", "/v1/credentials", g.get("/v1/credentials", admin))
		bind := g.post("/v1/bindings", admin, map[string]any{"refPattern": "connector:scm.*", "provider": "gitea",
			"baseUrl": prov.URL, "credentialId": str(cred.Body, "id"), "config": map[string]any{"repository": "acme/app"}})
		check("POST", "/v1/bindings", bind)
		check("GET", "/v1/bindings", g.get("/v1/bindings", admin))
		check("DELETE", "/v1/bindings/{id}", g.send("DELETE", "/v1/bindings/"+url.PathEscape(str(bind.Body, "id")), admin, nil))
		check("DELETE", "/v1/credentials/{id}", g.send("DELETE", "/v1/credentials/"+url.PathEscape(str(cred.Body, "id")), admin, nil))

		// MCP servers: an agent may not register one; the list; a sync of an unknown id.
		check("POST", "/v1/mcp-servers", g.post("/v1/mcp-servers", agent, map[string]any{"providerId": "x", "transport": "stdio", "command": "/bin/true"}))
		check("GET", "/v1/mcp-servers", g.get("/v1/mcp-servers", admin))
		check("POST", "/v1/mcp-servers/{id}/sync", g.post("/v1/mcp-servers/nothing/sync", admin, map[string]any{}))
		check("GET", "/v1/connections", g.get("/v1/connections", admin))
		check("POST", "/v1/connections", g.post("/v1/connections", admin, map[string]any{"providerId": "nothing"}))
		check("DELETE", "/v1/connections/{id}", g.send("DELETE", "/v1/connections/conn_nothing", admin, nil))
		check("GET", "/v1/connections/callback", g.get("/v1/connections/callback?state=s&code=c", ""))

		// The bundle: only --bundle-reader subjects.
		check("GET", "/v1/bundles/xema.tar.gz", g.get("/v1/bundles/xema.tar.gz", admin))

		// The console's reads, a held call by id, and the grant's lifecycle (revoke last).
		noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		if resp, err := noFollow.Get(g.URL + "/"); err != nil {
			t.Fatal(err)
		} else {
			resp.Body.Close()
			check("GET", "/", response{Status: resp.StatusCode, Header: resp.Header})
		}
		check("GET", "/v1/me", g.get("/v1/me", admin))
		check("GET", "/v1/stats", g.get("/v1/stats?window=1h", admin))
		check("GET", "/v1/stats", g.get("/v1/stats?window=1y", admin))
		check("GET", "/v1/catalog/{ref}", g.get("/v1/catalog/"+url.PathEscape("kb:page.read@1"), admin))
		check("GET", "/v1/catalog/{ref}", g.get("/v1/catalog/"+url.PathEscape("kb:nope@1"), admin))
		check("GET", "/v1/approvals/{id}", g.get("/v1/approvals/"+str(held.Body, "approvalId"), admin))
		check("GET", "/v1/approvals/{id}", g.get("/v1/approvals/apr_unknown", admin))
		grantID := g.activeGrant(admin, id)
		narrow := map[string]any{"customize": map[string]any{commentRef: map[string]any{"subjects": []string{"agent:support-bot"}}}}
		check("POST", "/v1/grants/{id}/change", g.post("/v1/grants/"+grantID+"/change?dryRun=true&since=1h", admin, narrow))
		check("POST", "/v1/grants/{id}/change", g.post("/v1/grants/"+grantID+"/change", agent, narrow))
		check("DELETE", "/v1/grants/{id}", g.send("DELETE", "/v1/grants/"+grantID, admin, nil))
		check("DELETE", "/v1/grants/{id}", g.send("DELETE", "/v1/grants/"+grantID, admin, nil))

		paths, _ := d.doc["paths"].(map[string]any)
		for p, ops := range paths {
			for m := range ops.(map[string]any) {
				if !d.seen[strings.ToUpper(m)+" "+p] {
					t.Errorf("documented route %s %s was not called", strings.ToUpper(m), p)
				}
			}
		}
	})
}
