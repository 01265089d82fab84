package server

import (
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/schemas"
)

// serveMounts are the paths `xema serve` mounts besides the router (cmd/xema/serve.go): the
// development issuer's JWKS, the MCP endpoint, the Prometheus metrics.
var serveMounts = []string{identity.JWKSPath, "/mcp", "/metrics"}

var echoParam = regexp.MustCompile(`:([a-zA-Z]+)`)

// TestOpenAPIDocumentsEveryRoute walks the Echo router and the mounts of xema serve, and
// schemas/openapi.json, both ways: no route undocumented, no documented route missing.
func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(schemas.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for path, ops := range doc.Paths {
		for method := range ops {
			documented[strings.ToUpper(method)+" "+path] = true
		}
	}
	noop := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	s := &Server{Mounts: map[string]http.Handler{}}
	for _, p := range serveMounts {
		s.Mounts[p] = noop
	}
	routed := map[string]bool{}
	for _, r := range s.router().Routes() {
		if r.Method == "echo_route_not_found" { // the group's own 404 for unknown /v1 paths
			continue
		}
		path := echoParam.ReplaceAllString(r.Path, "{$1}")
		path = strings.Replace(path, "/*", "/{path}", 1)
		if slices.Contains(serveMounts, path) {
			// A mount answers every method; the document names those it serves.
			continue
		}
		routed[r.Method+" "+path] = true
	}
	for _, p := range serveMounts {
		if _, ok := doc.Paths[p]; !ok {
			t.Errorf("mount %s is not documented", p)
		}
		for m := range doc.Paths[p] {
			delete(documented, strings.ToUpper(m)+" "+p)
		}
	}
	var undocumented, missing []string
	for r := range routed {
		if !documented[r] {
			undocumented = append(undocumented, r)
		}
	}
	for d := range documented {
		if !routed[d] {
			missing = append(missing, d)
		}
	}
	sort.Strings(undocumented)
	sort.Strings(missing)
	if len(undocumented) > 0 {
		t.Errorf("routes not in schemas/openapi.json: %v", undocumented)
	}
	if len(missing) > 0 {
		t.Errorf("documented routes the router does not serve: %v", missing)
	}
	if len(routed) < 30 {
		t.Fatalf("only %d routes walked", len(routed))
	}
}
