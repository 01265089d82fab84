package identity_test

import (
	"crypto/rsa"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/xemahq/xema/internal/identity"
)

func TestDevIssuerRoundTrip(t *testing.T) {
	dir := t.TempDir()
	iss, err := identity.OpenIssuer(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, "issuer", "signing-key.pem"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("signing key must exist with mode 0600: %v %v", fi, err)
	}
	abs, _ := filepath.Abs(dir)
	if iss.Name() != "xema-dev:"+abs || iss.KeyID() == "" {
		t.Fatalf("issuer %q kid %q", iss.Name(), iss.KeyID())
	}
	// A second process with the same data dir (xema dev token vs xema serve) has the same key.
	again, err := identity.OpenIssuer(dir, "")
	if err != nil || again.KeyID() != iss.KeyID() {
		t.Fatalf("reopen: kid %q vs %q, %v", again.KeyID(), iss.KeyID(), err)
	}

	tok, err := iss.Mint(identity.DevClaims{
		Subject: "agent:support-bot", Environment: "project", Groups: []string{"support"}, Roles: []string{"reader"},
		OrgRole: "org_member", Org: "acme", Project: "p1", Session: "s1", Armed: []string{"kb:*", "connector:channel.send-message@1"},
		TTL: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	v, err := identity.NewVerifier(t.Context(), again.VerifierConfig())
	if err != nil {
		t.Fatal(err)
	}
	ec, err := v.Verify(t.Context(), tok)
	if err != nil {
		t.Fatal(err)
	}
	want := identity.ExecContext{
		Subject: identity.Subject{Kind: "agent", Ref: "agent:support-bot"}, Groups: []string{"support"}, Roles: []string{"reader"},
		OrgRole: "org_member", Org: "acme", Project: "p1", Environment: "project", Session: "s1",
		Armed: []string{"kb:*", "connector:channel.send-message@1"},
	}
	if !equalEC(ec, want) {
		t.Fatalf("got %+v\nwant %+v", ec, want)
	}

	// No --armed: armed for all.
	tok2, err := iss.Mint(identity.DevClaims{Subject: "user:ada", Environment: "project", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ec2, err := v.Verify(t.Context(), tok2)
	if err != nil || !slices.Equal(ec2.Armed, []string{"*"}) || ec2.Groups == nil || ec2.Roles == nil {
		t.Fatalf("default armed / empty lists: %+v %v", ec2, err)
	}

	// A token from another data dir's issuer is refused.
	other, err := identity.OpenIssuer(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	foreign, _ := other.Mint(identity.DevClaims{Subject: "user:ada", Environment: "project", TTL: time.Minute})
	if _, err := v.Verify(t.Context(), foreign); identity.Reason(err) != identity.ReasonUnknownKID {
		t.Fatalf("foreign dev token: %v", err)
	}
}

func equalEC(a, b identity.ExecContext) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// The server mounts JWKSHandler; a Verifier pointed at it by URL accepts dev tokens too.
func TestDevIssuerJWKSHandler(t *testing.T) {
	iss, err := identity.OpenIssuer(t.TempDir(), "http://127.0.0.1/dev")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(iss.JWKSHandler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Header.Get("Content-Type") != "application/jwk-set+json" || !strings.Contains(string(body), iss.KeyID()) || strings.Contains(string(body), `"d"`) {
		t.Fatalf("JWKS: %s %s", resp.Header.Get("Content-Type"), body)
	}
	if resp, _ := http.Post(srv.URL, "text/plain", nil); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %d", resp.StatusCode)
	}
	cfg := iss.VerifierConfig()
	cfg.LocalJWKS, cfg.JWKSURL = nil, srv.URL
	v, err := identity.NewVerifier(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := iss.Mint(identity.DevClaims{Subject: "workflow:nightly", Environment: "app", TTL: time.Minute})
	if ec, err := v.Verify(t.Context(), tok); err != nil || ec.Subject.Ref != "workflow:nightly" {
		t.Fatalf("%+v %v", ec, err)
	}
}

func TestDevClaimsValidate(t *testing.T) {
	ok := identity.DevClaims{Subject: "agent:x", Environment: "project", TTL: time.Hour}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		mutate func(*identity.DevClaims)
		want   string
	}{
		"no kind":          {func(c *identity.DevClaims) { c.Subject = "x" }, "KIND:NAME"},
		"empty name":       {func(c *identity.DevClaims) { c.Subject = "agent:" }, "KIND:NAME"},
		"bad kind":         {func(c *identity.DevClaims) { c.Subject = "robot:x" }, "subject kind"},
		"no env":           {func(c *identity.DevClaims) { c.Environment = "" }, "environment"},
		"bad org role":     {func(c *identity.DevClaims) { c.OrgRole = "admin" }, "org role"},
		"zero ttl":         {func(c *identity.DevClaims) { c.TTL = 0 }, "ttl"},
		"ttl over 24h":     {func(c *identity.DevClaims) { c.TTL = 25 * time.Hour }, "ttl"},
		"bad armed":        {func(c *identity.DevClaims) { c.Armed = []string{"acme"} }, "armed pattern"},
		"uppercase armed":  {func(c *identity.DevClaims) { c.Armed = []string{"ACME:*"} }, "armed pattern"},
		"empty armed list": {func(c *identity.DevClaims) { c.Armed = []string{} }, "armed"},
		"blank group":      {func(c *identity.DevClaims) { c.Groups = []string{" "} }, "groups"},
	} {
		t.Run(name, func(t *testing.T) {
			c := ok
			tc.mutate(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want error mentioning %q, got %v", tc.want, err)
			}
		})
	}
	for _, p := range []string{"*", "acme:*", "kb:page.read@1", "kb:page.*@1", "kb:*@*", "connector:channel.send-message@1", "kb:**"} {
		if err := identity.ValidateArmed([]string{p}); err != nil {
			t.Errorf("%q rejected: %v", p, err)
		}
	}
}

func TestOpenIssuerRefusesLooseKey(t *testing.T) {
	dir := t.TempDir()
	if _, err := identity.OpenIssuer(dir, ""); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "issuer", "signing-key.pem"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := identity.OpenIssuer(dir, ""); err == nil || !strings.Contains(err.Error(), "0600") {
		t.Fatalf("a group/world-readable key must be refused: %v", err)
	}
}

// keycloakToken signs a Keycloak-shaped fixture with fresh times.
func keycloakToken(t *testing.T, k *rsa.PrivateKey, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	claims := map[string]any{}
	if err := json.Unmarshal(b, &claims); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	c := with(baseClaims(), "iss", nil, "aud", nil, "sub", nil, "xema_env", nil)
	for k, v := range claims {
		c[k] = v
	}
	c["iat"], c["exp"], c["auth_time"] = now.Unix(), now.Add(5*time.Minute).Unix(), now.Unix()
	return sign(t, jwt.SigningMethodRS256, k, "kc-rsa", c)
}

func TestKeycloakMapping(t *testing.T) {
	k := rsaKey(t, 3)
	ks := newKeyServer(t, map[string]*rsa.PrivateKey{"kc-rsa": k})
	m := identity.KeycloakMapping()
	m.Org.Default = identity.DefaultOrg // as --default-org default: two of the tokens name no org
	v := newVerifier(t, ks.URL, func(c *identity.Config) {
		c.Issuer, c.Audience, c.Mapping = "https://kc.example.com/realms/xema", "xema-gateway", &m
	})
	for _, tc := range []struct {
		file string
		want identity.ExecContext
	}{
		{"keycloak-user.json", identity.ExecContext{
			Subject: identity.Subject{Kind: "user", Ref: "user:ada"}, Groups: []string{"support", "platform"},
			Roles:   []string{"offline_access", "uma_authorization", "default-roles-xema", "org_admin", "reader"},
			OrgRole: "org_admin", Org: "acme", Project: "p1", Environment: "project",
			Session: "0b7c3e1a-6d2f-4a9b-8c5e-1f2a3b4c5d6e", Armed: []string{"*"},
		}},
		{"keycloak-service-account.json", identity.ExecContext{
			Subject: identity.Subject{Kind: "service", Ref: "service:billing-worker"}, Groups: []string{},
			Roles: []string{"default-roles-xema", "offline_access", "uma_authorization"},
			Org:   identity.DefaultOrg, Environment: "service", Armed: []string{"*"},
		}},
		{"keycloak-agent.json", identity.ExecContext{
			Subject: identity.Subject{Kind: "agent", Ref: "agent:support-bot"}, Groups: []string{},
			Roles: []string{"default-roles-xema"}, Org: identity.DefaultOrg, Environment: "public-session", Session: "s-42",
			Armed: []string{"kb:*", "connector:channel.send-message@1"},
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			ec, err := v.Verify(t.Context(), keycloakToken(t, k, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if !equalEC(ec, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", ec, tc.want)
			}
		})
	}
}

func TestParseMapping(t *testing.T) {
	m, err := identity.ParseMapping([]byte(`{"subjectName":{"claim":"client_id"},"subjectKind":{"default":"service"},
		"roles":"scp","environment":{"claim":"xema_env","default":"service"},"org":{"claim":"tenant","default":"acme"}}`))
	if err != nil {
		t.Fatal(err)
	}
	ec, err := m.Map(map[string]any{"client_id": "c1", "scp": []any{"a", "b"}})
	if err != nil || ec.Subject.Ref != "service:c1" || ec.Environment != "service" || !slices.Equal(ec.Roles, []string{"a", "b"}) {
		t.Fatalf("%+v %v", ec, err)
	}
	for name, doc := range map[string]string{
		"unknown field":     `{"subjectRef":"sub","environment":{"claim":"e"},"extra":1}`,
		"no subject":        `{"environment":{"claim":"e"}}`,
		"no kind":           `{"subjectName":{"claim":"n"},"environment":{"claim":"e"}}`,
		"bad default kind":  `{"subjectName":{"claim":"n"},"subjectKind":{"default":"bot"},"environment":{"claim":"e"}}`,
		"no environment":    `{"subjectRef":"sub"}`,
		"bad org role":      `{"subjectRef":"sub","environment":{"claim":"e"},"orgRole":{"default":"boss"}}`,
		"half service acct": `{"subjectRef":"sub","environment":{"claim":"e"},"serviceAccount":{"usernamePrefix":"sa-"}}`,
		"not JSON":          `{`,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := identity.ParseMapping([]byte(doc)); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

// BenchmarkVerifyDevES256 is the per-request cost with the development issuer (ES256).
func BenchmarkVerifyDevES256(b *testing.B) {
	iss, err := identity.OpenIssuer(b.TempDir(), "")
	if err != nil {
		b.Fatal(err)
	}
	v, err := identity.NewVerifier(b.Context(), iss.VerifierConfig())
	if err != nil {
		b.Fatal(err)
	}
	tok, err := iss.Mint(identity.DevClaims{Subject: "agent:support-bot", Environment: "project", Groups: []string{"support"}, Armed: []string{"kb:*"}, TTL: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Verify(b.Context(), tok); err != nil {
			b.Fatal(err)
		}
	}
}
