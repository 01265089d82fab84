package identity_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/xemahq/xema/internal/identity"
)

// TestStandaloneIssuer: the development issuer served on its own is an OpenID issuer a
// gateway verifies through --issuer (discovery, JWKS), its token endpoint mints what the form
// asks for, and a bad form is refused naming the field, minting nothing.
func TestStandaloneIssuer(t *testing.T) {
	var iss *identity.Issuer
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { iss.StandaloneHandler().ServeHTTP(w, r) }))
	defer srv.Close()
	var err error
	if iss, err = identity.OpenIssuer(t.TempDir(), srv.URL); err != nil {
		t.Fatal(err)
	}
	si, err := identity.NewServerIdentity(t.Context(), identity.ServerConfig{DataDir: t.TempDir(), Issuer: srv.URL, Audience: identity.DevAudience, ClaimMapping: "default"})
	if err != nil {
		t.Fatal(err)
	}
	defer si.Close()

	tok, err := identity.FetchDevToken(t.Context(), srv.URL, identity.DevClaims{Subject: "user:alice", Environment: "org", Org: "acme",
		OrgRole: "org_admin", Groups: []string{"ops", "sre"}, TTL: identity.MaxDevTTL})
	if err != nil {
		t.Fatal(err)
	}
	ec, err := si.Verify(t.Context(), tok)
	if err != nil || ec.Subject.Ref != "user:alice" || ec.Org != "acme" || ec.OrgRole != "org_admin" || len(ec.Groups) != 2 || ec.Environment != "org" {
		t.Fatalf("the gateway's verification of the issuer's token: %+v %v", ec, err)
	}

	for form, want := range map[string]string{
		"subject=user:alice&env=org&colour=red":  `unknown field \"colour\"`,
		"subject=alice&env=org":                  `subject \"alice\" must be KIND:NAME`,
		"subject=user:alice&env=org&ttl=forever": `ttl \"forever\": want a duration`,
		"subject=user:alice&env=org&ttl=48h":     `ttl 48h0m0s must be \u003e 0`,
	} {
		resp, err := http.PostForm(srv.URL+identity.TokenPath, mustQuery(t, form))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), want) || strings.Contains(string(body), "access_token") {
			t.Errorf("POST /token %s: %d %s, want 400 naming %s", form, resp.StatusCode, body, want)
		}
	}
}

func mustQuery(t *testing.T, s string) url.Values {
	t.Helper()
	v, err := url.ParseQuery(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
