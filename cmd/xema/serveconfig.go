package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
	"unicode"

	"github.com/xemahq/xema/internal/app"
	"github.com/xemahq/xema/internal/approval"
	"github.com/xemahq/xema/internal/grant"
	"github.com/xemahq/xema/internal/identity"
)

// serveConfig is every setting of `xema serve` once its flags, its --config file and the
// environment are read.
type serveConfig struct {
	addr string
	app  app.Config
	id   identity.ServerConfig
	lim  limits
	web  webFlags
}

// validate checks every setting of serve in one place, before anything opens: the first bad
// one is the error, naming its flag (or environment variable). serve exits 2 on it.
func (s serveConfig) validate() error {
	if err := s.app.SecretKeys.Check(); err != nil {
		return err
	}
	if err := s.app.MasterKey.Check(); err != nil {
		return err
	}
	c, id := s.app, s.id
	switch {
	case !validHostPort(s.addr):
		return fmt.Errorf("--addr %q: want HOST:PORT", s.addr)
	// 0 would silently mean the default to the verifier.
	case id.Leeway <= 0 || id.Leeway > identity.MaxLeeway:
		return fmt.Errorf("--token-leeway %v: want more than 0 and at most %v", id.Leeway, identity.MaxLeeway)
	case id.MaxTokenTTL <= 0:
		return fmt.Errorf("--max-token-ttl %v: want more than 0", id.MaxTokenTTL)
	case id.DefaultOrg != "" && id.Issuer == "":
		return errors.New("--default-org: needs --issuer (the development issuer's tokens default to '" + identity.DefaultOrg + "')")
	case strings.ContainsFunc(id.DefaultOrg, unicode.IsControl) || strings.TrimSpace(id.DefaultOrg) != id.DefaultOrg:
		return errors.New("--default-org: an org name without control characters or surrounding spaces")
	case s.web.consoleClientID != "" && id.Issuer == "":
		return errors.New("--console-client-id: needs --issuer (the development issuer signs in with a pasted token)")
	case (s.web.tlsCert == "") != (s.web.tlsKey == ""):
		return errors.New("--tls-cert and --tls-key: give both or neither")
	case c.OperatorOrg == "":
		return errors.New("--operator-org: want an org name")
	case c.UnauthAuditInterval < 0 || c.UnauthAuditInterval > time.Hour:
		return fmt.Errorf("--unauth-audit-interval %v: want 0 (the default) up to 1h", c.UnauthAuditInterval)
	case c.PolicyDirPoll < 0:
		return fmt.Errorf("--policy-dir-poll %v: want 0 (off) or more", c.PolicyDirPoll)
	case c.MCPResyncEvery < 0:
		return fmt.Errorf("--mcp-resync-every %v: want 0 (off) or more", c.MCPResyncEvery)
	case c.ApprovalTTL < 0:
		return fmt.Errorf("--approval-ttl %v: want more than 0", c.ApprovalTTL)
	case c.MaxPendingApprovals < 0:
		return fmt.Errorf("--max-pending-approvals %d: want at least 1 (0 is the default, %d)", c.MaxPendingApprovals, approval.DefaultMaxPending)
	case c.ReloadEvery < 0:
		return fmt.Errorf("--reload-every %v: want more than 0", c.ReloadEvery)
	case c.AuditRetain < 0 || (c.AuditRetain > 0 && c.AuditRetain < time.Hour):
		return fmt.Errorf("--audit-retain %v: want 0 (keep everything) or at least 1h", c.AuditRetain)
	}
	if c.BiomesDir != "" {
		// A gateway serving without the biomes it was told to load would answer every call
		// of them as unknown: refuse to start instead.
		if _, err := os.ReadDir(c.BiomesDir); err != nil {
			return fmt.Errorf("--biomes %s: %w", c.BiomesDir, err)
		}
	}
	if _, err := grant.ParseEnvironments(c.Environments); err != nil {
		return fmt.Errorf("--environments: %w", err)
	}
	if err := s.lim.check(); err != nil {
		return err
	}
	return s.web.check()
}

func validHostPort(addr string) bool {
	_, _, err := net.SplitHostPort(addr)
	return err == nil
}
