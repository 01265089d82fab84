package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/xemahq/xema/internal/apptest"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/server"
)

// TestRevokeDryRunTellsNothingOfAnotherOrg: DELETE /v1/grants/{id}?dryRun=true of another
// org's grant answers exactly as an unknown id does (the id aside), a bad dryRun value or
// query parameter is a 400 naming it, and a dry run leaves the grant active.
func TestRevokeDryRunTellsNothingOfAnotherOrg(t *testing.T) {
	f := apptest.New(t, apptest.Options{})
	ctx := context.Background()
	gs, err := f.App.Publisher.Grants(ctx, identity.DefaultOrg, "")
	if err != nil || len(gs) == 0 {
		t.Fatalf("the fixture's grants: %v %v", gs, err)
	}
	id := gs[0].ID
	admin := func(org string) identity.ExecContext {
		ec := apptest.Exec("user:alice", "org", "org_admin")
		ec.Org = org
		return ec
	}
	srv := httptest.NewServer((&server.Server{Gateway: f.App.Gateway, Tools: f.App.Tools, Idempotency: f.App.Idempotency, Audit: f.App.Store,
		Approvals: f.App.Approvals, OperatorOrg: identity.DefaultOrg, Ready: f.App.Ready, Mounts: map[string]http.Handler{},
		Auth: tokens{"own": admin(identity.DefaultOrg), "eve": admin("globex")}}).Handler())
	defer srv.Close()
	del := func(token, path string) (int, map[string]any) {
		t.Helper()
		status, body, _ := callJSON(t, http.MethodDelete, srv.URL+path, token)
		return status, body
	}
	// The answer without what differs by construction: the audit id and the id named.
	shape := func(status int, body map[string]any, named string) string {
		delete(body, "auditId")
		raw, _ := json.Marshal(body)
		return http.StatusText(status) + " " + strings.ReplaceAll(string(raw), named, "ID")
	}

	foreignStatus, foreign := del("eve", "/v1/grants/"+id+"?dryRun=true")
	unknownStatus, unknown := del("eve", "/v1/grants/grant-nope?dryRun=true")
	if a, b := shape(foreignStatus, foreign, id), shape(unknownStatus, unknown, "grant-nope"); a != b || foreignStatus != http.StatusNotFound {
		t.Fatalf("another org's grant: %s; an unknown one: %s; want the same 404", a, b)
	}

	for q, named := range map[string]string{"?dryRun=maybe": "dryRun", "?dryRun=true&dryRun=true": "dryRun", "?dryRun=true&grantId=x": "grantId",
		"?since=1h": "since", "?dryRun=true&since=forever": "/since"} {
		status, body := del("own", "/v1/grants/"+id+q)
		raw, _ := json.Marshal(body)
		if status != http.StatusBadRequest || !strings.Contains(string(raw), named) {
			t.Errorf("DELETE %s: %d %s, want 400 naming %s", q, status, raw, named)
		}
	}

	status, dry := del("own", "/v1/grants/"+id+"?dryRun=true&since=1h")
	if status != http.StatusOK || dry["dryRun"] != true || dry["status"] != "active" || dry["impact"] == nil {
		t.Fatalf("the org's own dry run: %d %v", status, dry)
	}
	after, err := f.App.Publisher.Grants(ctx, identity.DefaultOrg, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range after {
		if g.ID == id && g.Revoked() {
			t.Fatalf("a dry run revoked grant %s", id)
		}
	}
}
