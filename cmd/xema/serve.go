package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/xemahq/xema/internal/app"
	"github.com/xemahq/xema/internal/approval"
	"github.com/xemahq/xema/internal/buildinfo"
	"github.com/xemahq/xema/internal/console"
	"github.com/xemahq/xema/internal/egress"
	"github.com/xemahq/xema/internal/federation"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/masterkey"
	"github.com/xemahq/xema/internal/oauth"
	"github.com/xemahq/xema/internal/secretbox"
	"github.com/xemahq/xema/internal/server"
	"github.com/xemahq/xema/internal/telemetry"
	"github.com/xemahq/xema/internal/unauth"
)

// newServeCmd is `xema serve`; every one of its flags may also be set by --config.
func newServeCmd() *cobra.Command {
	var (
		cfg     app.Config
		addr    string
		idCfg   identity.ServerConfig
		lim     limits
		logJSON bool
		logLvl  string
		config  string
		bound   boundaryFlags
		web     webFlags
		mf      masterFlags
		notifyF notifyFlags
		// secretKeyFile is the credential keyring's file: in the config file, a restarted
		// replica finds it without the environment it was first started with.
		secretKeyFile string
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the gateway",
		Long: `Run the gateway. With no other configuration it stores everything in SQLite under
--data-dir and runs its own development issuer (tokens from 'xema dev token').`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if config != "" {
				if err := applyConfig(cmd.Flags(), config); err != nil {
					return &exitError{code: 2, err: err}
				}
			}
			if err := setupLogging(logJSON, logLvl); err != nil {
				return &exitError{code: 2, err: err}
			}
			fromEnv(&cfg, &idCfg)
			if secretKeyFile != "" { // the flag (or the config file) over the environment, as for the master key
				cfg.SecretKeys = secretbox.Source{File: secretKeyFile}
				idCfg.SecretKeys = cfg.SecretKeys
			}
			cfg.MasterKey = masterkey.SourceFromEnv(mf.file, cfg.DataDir, os.Getenv)
			if err := bound.apply(&cfg, idCfg); err != nil {
				return &exitError{code: 2, err: err}
			}
			var err error
			if cfg.Notify, err = notifyF.config(web.publicURL, addr, web.tlsCert != ""); err != nil {
				return &exitError{code: 2, err: err}
			}
			// Connections' redirect URI and the console links share the notifications' base.
			cfg.PublicURL = cfg.Notify.ConsoleURL
			if err := startPprof(cmd.Context()); err != nil {
				return err
			}
			return serve(cmd.Context(), addr, cfg, idCfg, bound.bundleReaders, lim, web)
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", "127.0.0.1:8181", "listen address HOST:PORT")
	f.StringVar(&cfg.DataDir, "data-dir", ".xema", "directory for the embedded store and the development issuer's key")
	f.StringVar(&cfg.BiomesDir, "biomes", "", "directory of biome directories to load at start")
	f.StringVar(&cfg.StoreDSN, "store", "", "store: empty for SQLite under --data-dir, or postgres://... (also XEMA_STORE)")
	f.StringSliceVar(&cfg.DevGrants, "dev-grant", nil, "approve these biomes with their default profile at first start (development only)")
	f.StringSliceVar(&cfg.Environments, "environments", nil, "NAME=KIND[,NAME=KIND...]: named environments beyond the defaults (one per kind), e.g. prod=project,staging=project; tokens and grants name them (config file: environments: {prod: project})")
	f.StringVar(&cfg.OperatorOrg, "operator-org", identity.DefaultOrg, "org whose administrators act for the operator: they move the lifecycle of the --biomes store and read audit records of no org")
	f.StringVar(&cfg.DecisionLog, "decision-log", "", "ship decisions in OPA's decision-log format to stdout, file:PATH or an http(s) URL (batched; off by default)")
	f.StringArrayVar(&cfg.DecisionLogMask, "decision-log-mask", nil, "a JSON pointer erased from every decision-log event's input, e.g. /input/session; repeatable")
	f.StringVar(&cfg.PolicyDir, "policy-dir", "", "directory of the platform team's own Rego (package xema.custom)")
	f.DurationVar(&cfg.PolicyDirPoll, "policy-dir-poll", 2*time.Second, "how often to look for changed Rego in --policy-dir (file sizes and mtimes; 0: never, restart to apply); a file that does not compile keeps the serving policy and is logged")
	f.DurationVar(&cfg.ReloadEvery, "reload-every", 2*time.Second, "how often to look for policy data changed through another replica")
	notifyF.addTo(f)
	f.DurationVar(&cfg.ApprovalTTL, "approval-ttl", 24*time.Hour, "how long a call held for human approval may wait before it expires and never runs")
	f.IntVar(&cfg.MaxPendingApprovals, "max-pending-approvals", approval.DefaultMaxPending, "most calls one subject of an org may have waiting for human approval at once (0: the default); beyond it a call is answered 429 TOO_MANY_PENDING and not held")
	f.DurationVar(&cfg.MCPResyncEvery, "mcp-resync-every", 0, "how often to sync every external MCP server's tools (0: only on its tools/list_changed)")
	f.DurationVar(&cfg.UnauthAuditInterval, "unauth-audit-interval", unauth.DefaultInterval, "unauthenticated attempts are audited in one record per route, reason and source per interval of this length")
	f.StringVar(&secretKeyFile, "secret-key-file", "", "file of the credential keyring (KID=BASE64 lines, newest first; over "+secretbox.EnvKeyFile+" and "+secretbox.EnvKey+"); every replica needs the same")
	f.StringVar(&mf.file, "master-key-file", "", "file of the master key wrapping the deployment's keys (also "+masterkey.EnvKeyFile+", or inline in "+
		masterkey.EnvKey+"); default: DATA_DIR/"+masterkey.FileName+", generated at first start (development only: it lies beside the data)")
	f.Var(retention{&cfg.AuditRetain}, "audit-retain", "remove audit records older than this (90d, 720h; 0 keeps everything), checked every 10 minutes in small batches")
	f.StringVar(&idCfg.Issuer, "issuer", "", "external OIDC issuer URL (default: the development issuer)")
	f.StringVar(&idCfg.Audience, "audience", "", "required token audience with --issuer")
	f.StringVar(&idCfg.JWKSURL, "jwks-url", "", "JWKS URL of --issuer (default: discovered from the issuer)")
	f.StringVar(&idCfg.ClaimMapping, "claim-mapping", "", "claim mapping: 'default', 'keycloak' or a JSON file")
	f.StringVar(&idCfg.DefaultOrg, "default-org", "", "with --issuer, the org of a token that names none (without it such tokens are refused); the development issuer's tokens default to '"+identity.DefaultOrg+"'")
	f.DurationVar(&idCfg.Leeway, "token-leeway", identity.DefaultLeeway, "clock skew allowed on a token's exp, nbf and iat (at most "+identity.MaxLeeway.String()+")")
	f.DurationVar(&idCfg.MaxTokenTTL, "max-token-ttl", identity.DefaultMaxTokenTTL, "refuse tokens whose lifetime (exp-iat, or exp-now without iat) exceeds this")
	def := defaultLimits()
	f.DurationVar(&lim.readHeader, "read-header-timeout", def.readHeader, "how long a client may take to send a request's headers (at most "+maxReadHeaderTimeout.String()+")")
	f.DurationVar(&lim.read, "read-timeout", def.read, "how long a client may take to send a whole request, headers and body (more than --read-header-timeout, at most "+maxReadTimeout.String()+"); a handler waiting for a provider is not cut off")
	f.DurationVar(&lim.idle, "idle-timeout", def.idle, "how long an idle keep-alive connection stays open (at most "+maxIdleTimeout.String()+")")
	f.IntVar(&lim.maxConns, "max-connections", def.maxConns, "most client connections open at once; more wait to be accepted")
	f.DurationVar(&lim.shutdown, "shutdown-timeout", def.shutdown, "on SIGTERM, how long in-flight calls may finish before they are cut off (each with an outcome recorded); more than the largest timeoutMs (120s)")
	f.IntVar(&lim.maxInflight, "max-inflight-calls", def.maxInflight, "most outbound calls (http, connector, MCP server) running at once; beyond it a call is answered 503 CAPACITY_EXCEEDED")
	f.IntVar(&lim.maxPerProvider, "max-inflight-per-provider", def.maxPerProvider, "most outbound calls one provider (biome or MCP server) has running at once; beyond it a call is answered 503 PROVIDER_BUSY (above --max-inflight-calls it never binds)")
	f.BoolVar(&logJSON, "log-json", false, "log as JSON lines")
	f.StringArrayVar(&bound.egressAllow, "egress-allow", nil, "a loopback or private CIDR (or address) outbound calls may reach; repeatable (the development issuer allows loopback)")
	f.StringArrayVar(&bound.stdio, "mcp-stdio", nil, "declare a stdio MCP server: 'ID=COMMAND [ARG]...' (split on spaces); repeatable; the API registers it by providerId ID")
	f.StringVar(&bound.stdioConfig, "mcp-stdio-config", "", "JSON file declaring stdio MCP servers: [{\"id\", \"command\", \"args\", \"env\"}]")
	f.StringArrayVar(&bound.bundleReaders, "bundle-reader", nil, "a subject (e.g. service:opa-sidecar) allowed to GET the policy bundle; repeatable; nobody else is")
	f.StringArrayVar(&web.metricsReaders, "metrics-reader", nil, "a subject (e.g. service:prometheus) allowed to GET /metrics on the API listener; repeatable; nobody else is")
	f.StringVar(&web.metricsAddr, "metrics-addr", "", "also serve GET /metrics without authentication on this HOST:PORT (bind it where only the scraper reaches)")
	f.StringArrayVar(&web.corsOrigins, "cors-origin", nil, "a browser origin (scheme://host[:port]) granted CORS, e.g. for a browser MCP client; repeatable; no other origin is")
	f.StringVar(&web.consoleClientID, "console-client-id", "", "OAuth client id (public, PKCE, no secret) of the web console at --issuer: /console/login then signs in with the authorization code flow, redirect URI <public URL>/console/callback")
	f.StringVar(&web.consoleScope, "console-scope", "openid", "scopes the console asks --issuer for (space-separated; openid is always asked)")
	f.StringVar(&cfg.TokenExchange, "token-exchange", "", "a JSON file of providers whose calls carry a token exchanged (RFC 8693) for the caller's (docs/identity.md)")
	f.StringVar(&web.publicURL, "public-url", "", "the gateway's external base URL (behind a proxy), named in the RFC 9728 metadata; default: from each request's Host")
	f.StringVar(&web.tlsCert, "tls-cert", "", "PEM certificate (chain) to serve HTTPS with; needs --tls-key")
	f.StringVar(&web.tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	f.StringVar(&logLvl, "log-level", "info", "debug, info, warn or error")
	addPprofFlag(f)
	f.StringVar(&config, "config", "", "YAML file of serve flags by name (e.g. addr: 0.0.0.0:8181, egress-allow: [10.0.0.0/8]); ${VAR} and ${VAR:-default} expand from the environment; flags given on the command line override it")
	return cmd
}

// webFlags are the browser- and client-facing settings: CORS, the public URL, TLS.
// fromEnv is every environment variable serve reads, read here and nowhere deeper: the
// store (XEMA_STORE, under --store), the credential keyring (XEMA_SECRET_KEY or
// XEMA_SECRET_KEY_FILE) and the outbound identity registration (XEMA_IDENTITY_URL,
// IDENTITY_API_INTERNAL_TOKEN). OTEL_* are the OTel SDK's own (telemetry.SetupTracing).
func fromEnv(cfg *app.Config, idCfg *identity.ServerConfig) {
	cfg.StoreDSN = storeDSN(cfg.StoreDSN)
	cfg.SecretKeys = secretbox.SourceFromEnv(os.Getenv)
	idCfg.SecretKeys = cfg.SecretKeys
	idCfg.IdentityURL = os.Getenv(identity.EnvIdentityURL)
	idCfg.BootstrapToken = os.Getenv(oauth.EnvBootstrapToken)
}

type webFlags struct {
	corsOrigins     []string
	publicURL       string
	consoleClientID string
	consoleScope    string
	tlsCert, tlsKey string
	metricsReaders  []string
	metricsAddr     string
}

// tlsConfig loads --tls-cert and --tls-key (both given, or neither: serveConfig.validate);
// nil when neither is given (plain HTTP).
func (w webFlags) tlsConfig() (*tls.Config, error) {
	if w.tlsCert == "" && w.tlsKey == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(w.tlsCert, w.tlsKey)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}, nil
}

func (w webFlags) check() error {
	for _, o := range w.corsOrigins {
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" || u.RawQuery != "" || u.User != nil {
			return fmt.Errorf("--cors-origin %q: want an origin scheme://host[:port], without a path", o)
		}
	}
	for _, r := range w.metricsReaders {
		if kind, name, ok := strings.Cut(r, ":"); !ok || name == "" || !identity.ValidSubjectKind(kind) {
			return fmt.Errorf("--metrics-reader %q: want a subject KIND:NAME such as service:prometheus", r)
		}
	}
	if w.metricsAddr != "" {
		if _, _, err := net.SplitHostPort(w.metricsAddr); err != nil {
			return fmt.Errorf("--metrics-addr %q: want HOST:PORT", w.metricsAddr)
		}
	}
	if w.publicURL != "" {
		if u, err := url.Parse(w.publicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("--public-url %q: want an absolute http(s) URL", w.publicURL)
		}
	}
	return nil
}

// consoleOIDC is the console's production sign-in from --console-client-id: the endpoints
// come from the issuer's discovery document, read once at start (like its JWKS).
func (w webFlags) consoleOIDC(ctx context.Context, idCfg identity.ServerConfig) (*console.OIDC, error) {
	if w.consoleClientID == "" {
		return nil, nil
	}
	d, err := identity.Discover(ctx, idCfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("--console-client-id: %w", err)
	}
	if d.AuthorizationEndpoint == "" || d.TokenEndpoint == "" {
		return nil, fmt.Errorf("--console-client-id: the discovery document of %s names no authorization_endpoint or token_endpoint", idCfg.Issuer)
	}
	scopes := strings.Fields(w.consoleScope)
	if !slices.Contains(scopes, "openid") {
		scopes = append([]string{"openid"}, scopes...)
	}
	return &console.OIDC{Issuer: idCfg.Issuer, ClientID: w.consoleClientID, Audience: idCfg.Audience, Scope: strings.Join(scopes, " "),
		AuthorizationEndpoint: d.AuthorizationEndpoint, TokenEndpoint: d.TokenEndpoint, PublicURL: w.publicURL}, nil
}

func setupLogging(asJSON bool, level string) error {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	if asJSON {
		slog.SetDefault(slog.New(slog.NewJSONHandler(os.Stderr, opts)))
		return nil
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, opts)))
	return nil
}

// boundaryFlags are the trust-boundary flags: egress allow-list, declared stdio servers,
// bundle readers.
type boundaryFlags struct {
	egressAllow   []string
	stdio         []string
	stdioConfig   string
	bundleReaders []string
}

func (b boundaryFlags) apply(cfg *app.Config, idCfg identity.ServerConfig) error {
	allow, err := egress.ParseAllow(b.egressAllow)
	if err != nil {
		return fmt.Errorf("--egress-allow: %w", err)
	}
	if idCfg.Issuer == "" { // the development issuer: make run and local providers work
		allow = append(allow, egress.Loopback()...)
	}
	cfg.EgressAllow = allow
	for _, v := range b.stdio {
		s, err := federation.ParseStdioFlag(v)
		if err != nil {
			return err
		}
		cfg.MCPStdio = append(cfg.MCPStdio, s)
	}
	if b.stdioConfig != "" {
		list, err := federation.LoadStdioConfig(b.stdioConfig)
		if err != nil {
			return err
		}
		cfg.MCPStdio = append(cfg.MCPStdio, list...)
	}
	if _, err := federation.DeclareStdio(cfg.MCPStdio); err != nil {
		return err
	}
	for _, s := range b.bundleReaders {
		if kind, name, ok := strings.Cut(s, ":"); !ok || name == "" || !identity.ValidSubjectKind(kind) {
			return fmt.Errorf("--bundle-reader %q: want a subject KIND:NAME such as service:opa-sidecar", s)
		}
	}
	return nil
}

// Upper bounds of the per-request limits (docs/security.md): a deployment may tighten
// them, never loosen them.
const (
	maxReadHeaderTimeout = 10 * time.Second
	maxReadTimeout       = 30 * time.Second
	maxIdleTimeout       = 120 * time.Second
)

// limits bound one request's work and the gateway's concurrency.
type limits struct {
	readHeader, read, idle time.Duration
	maxConns, maxInflight  int
	// maxPerProvider bounds one provider's (biome's or MCP server's) calls in flight.
	maxPerProvider int
	// shutdown is how long a SIGTERM waits for in-flight calls.
	shutdown time.Duration
}

// DefaultShutdownTimeout outlasts the largest timeoutMs an invocation may declare (120 s),
// so a drain never cuts off a call that is within its own bounds.
const DefaultShutdownTimeout = 130 * time.Second

// defaultLimits are the flags' defaults.
func defaultLimits() limits {
	return limits{readHeader: maxReadHeaderTimeout, read: maxReadTimeout, idle: maxIdleTimeout, maxConns: 1024, maxInflight: 256,
		maxPerProvider: 64, shutdown: DefaultShutdownTimeout}
}

func (l limits) check() error {
	switch {
	case l.readHeader <= 0 || l.readHeader > maxReadHeaderTimeout:
		return fmt.Errorf("--read-header-timeout %v: want more than 0 and at most %v", l.readHeader, maxReadHeaderTimeout)
	case l.read <= l.readHeader || l.read > maxReadTimeout:
		return fmt.Errorf("--read-timeout %v: want more than --read-header-timeout (%v) and at most %v", l.read, l.readHeader, maxReadTimeout)
	case l.idle <= 0 || l.idle > maxIdleTimeout:
		return fmt.Errorf("--idle-timeout %v: want more than 0 and at most %v", l.idle, maxIdleTimeout)
	case l.maxConns <= 0:
		return fmt.Errorf("--max-connections %d: want at least 1", l.maxConns)
	case l.maxInflight <= 0:
		return fmt.Errorf("--max-inflight-calls %d: want at least 1", l.maxInflight)
	case l.maxPerProvider <= 0:
		return fmt.Errorf("--max-inflight-per-provider %d: want at least 1", l.maxPerProvider)
	case l.shutdown <= 0:
		return fmt.Errorf("--shutdown-timeout %v: want more than 0", l.shutdown)
	}
	return nil
}

// consoleURL is where the web console answers: under --public-url when given, else on the
// bound address (an unspecified host is named as loopback, reachable from this machine).
func consoleURL(publicURL string, bound net.Addr, tls bool) string {
	if publicURL != "" {
		return strings.TrimSuffix(publicURL, "/") + "/console/"
	}
	scheme := "http"
	if tls {
		scheme = "https"
	}
	host, port, err := net.SplitHostPort(bound.String())
	if err != nil {
		return scheme + "://" + bound.String() + "/console/"
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return scheme + "://" + net.JoinHostPort(host, port) + "/console/"
}

func serve(ctx context.Context, addr string, cfg app.Config, idCfg identity.ServerConfig, bundleReaders []string, lim limits, web webFlags) error {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	if err := (serveConfig{addr: addr, app: cfg, id: idCfg, lim: lim, web: web}).validate(); err != nil {
		return &exitError{code: 2, err: err}
	}
	tlsCfg, err := web.tlsConfig()
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	tracing, err := telemetry.SetupTracing(ctx, buildinfo.Read().Short())
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tracing.Shutdown(sctx); err != nil {
			slog.Warn("trace exporter shutdown", "err", err)
		}
	}()
	consoleOIDC, err := web.consoleOIDC(ctx, idCfg)
	if err != nil {
		return err
	}
	idCfg.DataDir = cfg.DataDir
	ids, err := identity.NewServerIdentity(ctx, idCfg)
	if err != nil {
		return fmt.Errorf("identity: %w", err)
	}
	defer ids.Close()
	cfg.Tokens, cfg.WrapTransport = ids.ServiceTokens(), tracing.Transport
	cfg.MaxInflight, cfg.MaxPerProvider = lim.maxInflight, lim.maxPerProvider
	cfg.Name = web.publicURL
	a, err := app.New(ctx, cfg)
	if err != nil {
		return err
	}
	a.KeysReady = ids.KeysReady
	srv, err := a.Server(app.Edge{Auth: ids, Mounts: ids.Mounts(), IssuerJWKS: ids.IssuerJWKS(), Issuer: idCfg.Issuer,
		BundleReaders: bundleReaders, MetricsReaders: web.metricsReaders, BodyReadTimeout: lim.read - lim.readHeader,
		CORSOrigins: web.corsOrigins, PublicURL: web.publicURL, ConsoleOIDC: consoleOIDC})
	if err != nil {
		return err
	}
	// No ReadTimeout: it would also cut off a handler waiting for a slow provider. The body
	// read is bounded by server.boundBody instead, the provider's wait by its timeoutMs.
	return a.Run(ctx, app.Listener{Addr: addr, Handler: tracing.Handler(srv.Handler()), TLS: tlsCfg,
		ReadHeaderTimeout: lim.readHeader, IdleTimeout: lim.idle, MaxConns: lim.maxConns, Shutdown: lim.shutdown,
		MetricsAddr: web.metricsAddr, Metrics: server.MetricsHandler(),
		Serving: func(bound net.Addr) {
			slog.Info("xema serving", "addr", bound.String(), "tls", tlsCfg != nil, "data-dir", cfg.DataDir,
				"console", consoleURL(web.publicURL, bound, tlsCfg != nil), "policy-dir", a.Policy.PolicyDir(),
				"policy-files", a.Policy.PlatformFiles(), "policy-revision", a.Policy.Revision(),
				"version", buildinfo.Read().Short(), "tracing", tracing.Enabled())
		}})
}
