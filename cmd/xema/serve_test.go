package main

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/app"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/masterkey"
	"github.com/xemahq/xema/internal/secretbox"
)

func TestServeRefusesTokenLeewayOutOfRange(t *testing.T) {
	for _, leeway := range []time.Duration{0, -time.Second, identity.MaxLeeway + time.Second} {
		t.Run(leeway.String(), func(t *testing.T) {
			err := serve(t.Context(), "127.0.0.1:0", app.Config{DataDir: t.TempDir(), OperatorOrg: identity.DefaultOrg}, identity.ServerConfig{Leeway: leeway}, nil, defaultLimits(), webFlags{})
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), "--token-leeway") {
				t.Fatalf("leeway %v: want exit 2 naming --token-leeway, got %v", leeway, err)
			}
		})
	}
}

func TestServeRefusesNegativeMCPResync(t *testing.T) {
	err := serve(t.Context(), "127.0.0.1:0", app.Config{DataDir: t.TempDir(), OperatorOrg: identity.DefaultOrg, MCPResyncEvery: -time.Second},
		identity.ServerConfig{Leeway: identity.DefaultLeeway, MaxTokenTTL: identity.DefaultMaxTokenTTL}, nil, defaultLimits(), webFlags{})
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), "--mcp-resync-every") {
		t.Fatalf("want exit 2 naming --mcp-resync-every, got %v", err)
	}
}

func TestServeRefusesLimitsOutOfRange(t *testing.T) {
	for _, tc := range []struct {
		flag   string
		mutate func(*limits)
	}{
		{"--read-header-timeout", func(l *limits) { l.readHeader = 0 }},
		{"--read-header-timeout", func(l *limits) { l.readHeader = 11 * time.Second }},
		{"--read-timeout", func(l *limits) { l.read = l.readHeader }},
		{"--read-timeout", func(l *limits) { l.read = 31 * time.Second }},
		{"--idle-timeout", func(l *limits) { l.idle = 121 * time.Second }},
		{"--idle-timeout", func(l *limits) { l.idle = 0 }},
		{"--max-connections", func(l *limits) { l.maxConns = 0 }},
		{"--max-inflight-calls", func(l *limits) { l.maxInflight = -1 }},
		{"--max-inflight-per-provider", func(l *limits) { l.maxPerProvider = 0 }},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			lim := defaultLimits()
			tc.mutate(&lim)
			err := serve(t.Context(), "127.0.0.1:0", app.Config{DataDir: t.TempDir(), OperatorOrg: identity.DefaultOrg},
				identity.ServerConfig{Leeway: identity.DefaultLeeway, MaxTokenTTL: identity.DefaultMaxTokenTTL}, nil, lim, webFlags{})
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), tc.flag) {
				t.Fatalf("want exit 2 naming %s, got %v", tc.flag, err)
			}
		})
	}
	if err := defaultLimits().check(); err != nil {
		t.Fatalf("the defaults are refused: %v", err)
	}
}

func TestServeRefusesMaxTokenTTL(t *testing.T) {
	err := serve(t.Context(), "127.0.0.1:0", app.Config{DataDir: t.TempDir(), OperatorOrg: identity.DefaultOrg},
		identity.ServerConfig{Leeway: identity.DefaultLeeway, MaxTokenTTL: -time.Hour}, nil, defaultLimits(), webFlags{})
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), "--max-token-ttl") {
		t.Fatalf("want exit 2 naming --max-token-ttl, got %v", err)
	}
}

func TestServeRefusesEmptyOperatorOrg(t *testing.T) {
	err := serve(t.Context(), "127.0.0.1:0", app.Config{DataDir: t.TempDir()},
		identity.ServerConfig{Leeway: identity.DefaultLeeway, MaxTokenTTL: identity.DefaultMaxTokenTTL}, nil, defaultLimits(), webFlags{})
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), "--operator-org") {
		t.Fatalf("want exit 2 naming --operator-org, got %v", err)
	}
}

func TestWebFlagsCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		web  webFlags
		flag string // "" accepted
	}{
		{"none", webFlags{}, ""},
		{"origins", webFlags{corsOrigins: []string{"https://inspector.example", "http://localhost:6274"}}, ""},
		{"origin with path", webFlags{corsOrigins: []string{"https://a.example/app"}}, "--cors-origin"},
		{"origin without scheme", webFlags{corsOrigins: []string{"a.example"}}, "--cors-origin"},
		{"wildcard", webFlags{corsOrigins: []string{"*"}}, "--cors-origin"},
		{"public url", webFlags{publicURL: "https://xema.example"}, ""},
		{"relative public url", webFlags{publicURL: "/xema"}, "--public-url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.web.check()
			if tc.flag == "" && err != nil || tc.flag != "" && (err == nil || !strings.Contains(err.Error(), tc.flag)) {
				t.Fatalf("check: %v, want %q", err, tc.flag)
			}
		})
	}
}

func TestConsoleOIDCFlags(t *testing.T) {
	var doc map[string]string
	iss := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(doc)
	}))
	defer iss.Close()
	issuer := iss.URL + "/"
	idCfg := identity.ServerConfig{Issuer: issuer, Audience: "xema"}
	if o, err := (webFlags{}).consoleOIDC(t.Context(), idCfg); o != nil || err != nil {
		t.Fatalf("without --console-client-id: %v %v", o, err)
	}
	doc = map[string]string{"issuer": issuer, "authorization_endpoint": iss.URL + "/auth"}
	if _, err := (webFlags{consoleClientID: "c"}).consoleOIDC(t.Context(), idCfg); err == nil || !strings.Contains(err.Error(), "token_endpoint") {
		t.Fatalf("no token endpoint: %v", err)
	}
	doc["token_endpoint"] = iss.URL + "/token"
	o, err := (webFlags{consoleClientID: "c", consoleScope: "profile groups", publicURL: "https://x.example"}).consoleOIDC(t.Context(), idCfg)
	if err != nil || o.Scope != "openid profile groups" || o.TokenEndpoint != iss.URL+"/token" || o.Audience != "xema" || o.PublicURL != "https://x.example" {
		t.Fatalf("console OIDC: %+v %v", o, err)
	}
}

// TestServeConfigNamesTheFlag: every setting serve validates, in one place, is refused with an
// error naming its flag (or variable), and the defaults pass.
func TestServeConfigNamesTheFlag(t *testing.T) {
	ok := serveConfig{addr: "127.0.0.1:0", app: app.Config{OperatorOrg: "default"}, lim: defaultLimits(),
		id: identity.ServerConfig{Leeway: identity.DefaultLeeway, MaxTokenTTL: identity.DefaultMaxTokenTTL}}
	if err := ok.validate(); err != nil {
		t.Fatalf("a valid config: %v", err)
	}
	for flag, mutate := range map[string]func(s *serveConfig){
		"--addr":                  func(s *serveConfig) { s.addr = "8080" },
		"--token-leeway":          func(s *serveConfig) { s.id.Leeway = 0 },
		"--max-token-ttl":         func(s *serveConfig) { s.id.MaxTokenTTL = -time.Hour },
		"--default-org":           func(s *serveConfig) { s.id.DefaultOrg = "acme" },
		"--console-client-id":     func(s *serveConfig) { s.web.consoleClientID = "c" },
		"--tls-cert":              func(s *serveConfig) { s.web.tlsKey = "/k.pem" },
		"--operator-org":          func(s *serveConfig) { s.app.OperatorOrg = "" },
		"--unauth-audit-interval": func(s *serveConfig) { s.app.UnauthAuditInterval = 2 * time.Hour },
		"--policy-dir-poll":       func(s *serveConfig) { s.app.PolicyDirPoll = -time.Second },
		"--mcp-resync-every":      func(s *serveConfig) { s.app.MCPResyncEvery = -time.Second },
		"--approval-ttl":          func(s *serveConfig) { s.app.ApprovalTTL = -time.Second },
		"--max-pending-approvals": func(s *serveConfig) { s.app.MaxPendingApprovals = -1 },
		"--reload-every":          func(s *serveConfig) { s.app.ReloadEvery = -time.Second },
		"--audit-retain":          func(s *serveConfig) { s.app.AuditRetain = time.Minute },
		"--biomes":                func(s *serveConfig) { s.app.BiomesDir = filepath.Join(t.TempDir(), "missing") },
		"--environments":          func(s *serveConfig) { s.app.Environments = []string{"no-kind"} },
		"--master-key-file":       func(s *serveConfig) { s.app.MasterKey = masterkey.Source{Inline: "k", File: "/k"} },
		"--max-connections":       func(s *serveConfig) { s.lim.maxConns = 0 },
		"--public-url":            func(s *serveConfig) { s.web.publicURL = "/xema" },
		// Not a flag: both keyring variables set is refused before anything opens.
		"XEMA_SECRET_KEY_FILE": func(s *serveConfig) { s.app.SecretKeys = secretbox.Source{Inline: "k", File: "/k"} },
	} {
		s := ok
		mutate(&s)
		if err := s.validate(); err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%s: %v, want an error naming the flag", flag, err)
		}
	}
}
