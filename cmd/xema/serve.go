package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/xemahq/xema/internal/app"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/server"
)

func init() {
	var (
		cfg     app.Config
		addr    string
		idCfg   identity.ServerConfig
		logJSON bool
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the gateway",
		Long: `Run the gateway. With no other configuration it stores everything in SQLite under
--data-dir and runs its own development issuer (tokens from 'xema dev token').`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			setupLogging(logJSON)
			if env := os.Getenv("XEMA_STORE"); cfg.StoreDSN == "" && env != "" {
				cfg.StoreDSN = env
			}
			return serve(cmd.Context(), addr, cfg, idCfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", "127.0.0.1:8181", "listen address HOST:PORT")
	f.StringVar(&cfg.DataDir, "data-dir", ".xema", "directory for the embedded store and the development issuer's key")
	f.StringVar(&cfg.BiomesDir, "biomes", "", "directory of biome directories to load at start")
	f.StringVar(&cfg.StoreDSN, "store", "", "store: empty for SQLite under --data-dir, or postgres://... (also XEMA_STORE)")
	f.StringSliceVar(&cfg.DevGrants, "dev-grant", nil, "approve these biomes with their default profile at first start (development only)")
	f.StringVar(&cfg.PolicyDir, "policy-dir", "", "directory of the platform team's own Rego (package xema.custom)")
	f.DurationVar(&cfg.ReloadEvery, "reload-every", 2*time.Second, "how often to look for policy data changed through another replica")
	f.DurationVar(&cfg.ApprovalTTL, "approval-ttl", 24*time.Hour, "how long a call held for human approval may wait before it expires and never runs")
	f.DurationVar(&cfg.MCPResyncEvery, "mcp-resync-every", 0, "how often to sync every external MCP server's tools (0: only on its tools/list_changed)")
	f.StringVar(&idCfg.Issuer, "issuer", "", "external OIDC issuer URL (default: the development issuer)")
	f.StringVar(&idCfg.Audience, "audience", "", "required token audience with --issuer")
	f.StringVar(&idCfg.JWKSURL, "jwks-url", "", "JWKS URL of --issuer (default: discovered from the issuer)")
	f.StringVar(&idCfg.ClaimMapping, "claim-mapping", "", "claim mapping: 'default', 'keycloak' or a JSON file")
	f.DurationVar(&idCfg.Leeway, "token-leeway", identity.DefaultLeeway, "clock skew allowed on a token's exp, nbf and iat (at most "+identity.MaxLeeway.String()+")")
	f.DurationVar(&idCfg.MaxTokenTTL, "max-token-ttl", identity.DefaultMaxTokenTTL, "refuse tokens whose lifetime (exp-iat, or exp-now without iat) exceeds this")
	f.BoolVar(&logJSON, "log-json", false, "log as JSON lines")
	rootCmd.AddCommand(cmd)
}

func setupLogging(asJSON bool) {
	opts := &slog.HandlerOptions{Level: slog.LevelInfo}
	if asJSON {
		slog.SetDefault(slog.New(slog.NewJSONHandler(os.Stderr, opts)))
		return
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, opts)))
}

func serve(ctx context.Context, addr string, cfg app.Config, idCfg identity.ServerConfig) error {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("--addr %q: want HOST:PORT", addr)
	}
	// Checked before anything opens; 0 would silently mean the default to the verifier.
	if idCfg.Leeway <= 0 || idCfg.Leeway > identity.MaxLeeway {
		return &exitError{code: 2, err: fmt.Errorf("--token-leeway %v: want more than 0 and at most %v", idCfg.Leeway, identity.MaxLeeway)}
	}
	if idCfg.MaxTokenTTL <= 0 {
		return &exitError{code: 2, err: fmt.Errorf("--max-token-ttl %v: want more than 0", idCfg.MaxTokenTTL)}
	}
	if cfg.MCPResyncEvery < 0 {
		return &exitError{code: 2, err: fmt.Errorf("--mcp-resync-every %v: want 0 (off) or more", cfg.MCPResyncEvery)}
	}
	a, err := app.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer a.Close()

	idCfg.DataDir = cfg.DataDir
	ids, err := identity.NewServerIdentity(ctx, idCfg)
	if err != nil {
		return fmt.Errorf("identity: %w", err)
	}
	defer ids.Close()
	a.Gateway.Tokens = ids.ServiceTokens()

	srv := &server.Server{Gateway: a.Gateway, Auth: ids, Ready: a.Ready, Bundles: a.Policy, Mounts: map[string]http.Handler{}}
	srv.Approvals = a.Approvals
	for path, h := range ids.Mounts() {
		srv.Mounts[path] = h
	}
	srv.Mounts["/mcp"] = srv.MCPHandler()
	srv.Mounts["/metrics"] = server.MetricsHandler()

	go a.Watch(ctx, cfg.ReloadEvery)
	go a.PruneRateCounters(ctx, time.Minute)
	go a.Federation.ResyncEvery(ctx, cfg.MCPResyncEvery)

	hs := &http.Server{Addr: addr, Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	slog.Info("xema serving", "addr", ln.Addr().String(), "data-dir", cfg.DataDir, "policy-revision", a.Policy.Revision())
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve: %w", err)
		}
	case <-ctx.Done():
		slog.Info("shutting down")
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := hs.Shutdown(shutdownCtx); err != nil {
			return fmt.Errorf("shutdown: %w", err)
		}
	}
	return nil
}
