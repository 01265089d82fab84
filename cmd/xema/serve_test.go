package main

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/app"
	"github.com/xemahq/xema/internal/identity"
)

func TestServeRefusesTokenLeewayOutOfRange(t *testing.T) {
	for _, leeway := range []time.Duration{0, -time.Second, identity.MaxLeeway + time.Second} {
		t.Run(leeway.String(), func(t *testing.T) {
			err := serve(t.Context(), "127.0.0.1:0", app.Config{DataDir: t.TempDir()}, identity.ServerConfig{Leeway: leeway}, nil)
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), "--token-leeway") {
				t.Fatalf("leeway %v: want exit 2 naming --token-leeway, got %v", leeway, err)
			}
		})
	}
}

func TestServeRefusesNegativeMCPResync(t *testing.T) {
	err := serve(t.Context(), "127.0.0.1:0", app.Config{DataDir: t.TempDir(), OperatorOrg: identity.DefaultOrg, MCPResyncEvery: -time.Second},
		identity.ServerConfig{Leeway: identity.DefaultLeeway}, nil)
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), "--mcp-resync-every") {
		t.Fatalf("want exit 2 naming --mcp-resync-every, got %v", err)
	}
}

func TestServeRefusesEmptyOperatorOrg(t *testing.T) {
	err := serve(t.Context(), "127.0.0.1:0", app.Config{DataDir: t.TempDir()},
		identity.ServerConfig{Leeway: identity.DefaultLeeway}, nil)
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), "--operator-org") {
		t.Fatalf("want exit 2 naming --operator-org, got %v", err)
	}
}
