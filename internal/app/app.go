// Package app assembles a running gateway from its configuration: store, kernel handlers,
// catalog, policy, identity and the HTTP surface. cmd/xema/serve.go is a thin shell over it.
package app

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xemahq/xema/internal/admin"
	"github.com/xemahq/xema/internal/approval"
	"github.com/xemahq/xema/internal/audit"
	"github.com/xemahq/xema/internal/binding"
	"github.com/xemahq/xema/internal/capacity"
	"github.com/xemahq/xema/internal/catalog"
	"github.com/xemahq/xema/internal/connection"
	"github.com/xemahq/xema/internal/credential"
	"github.com/xemahq/xema/internal/decisionlog"
	"github.com/xemahq/xema/internal/demo"
	"github.com/xemahq/xema/internal/deploykeys"
	"github.com/xemahq/xema/internal/egress"
	"github.com/xemahq/xema/internal/exchange"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/federation"
	"github.com/xemahq/xema/internal/gateway"
	"github.com/xemahq/xema/internal/grant"
	"github.com/xemahq/xema/internal/idempotency"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/insight"
	"github.com/xemahq/xema/internal/kernel"
	"github.com/xemahq/xema/internal/manifest"
	"github.com/xemahq/xema/internal/masterkey"
	"github.com/xemahq/xema/internal/metatool"
	"github.com/xemahq/xema/internal/notify"
	"github.com/xemahq/xema/internal/outage"
	"github.com/xemahq/xema/internal/periodic"
	"github.com/xemahq/xema/internal/policy"
	"github.com/xemahq/xema/internal/ratelimit"
	"github.com/xemahq/xema/internal/replay"
	"github.com/xemahq/xema/internal/runner"
	"github.com/xemahq/xema/internal/secretbox"
	"github.com/xemahq/xema/internal/spool"
	"github.com/xemahq/xema/internal/store"
	"github.com/xemahq/xema/internal/store/engine"
	"github.com/xemahq/xema/internal/txntoken"
	"github.com/xemahq/xema/internal/unauth"
)

// KernelBiome is the built-in biome the Go-registered capabilities belong to.
const KernelBiome = catalog.BuiltinBiome

// Config is what `xema serve` takes.
type Config struct {
	DataDir   string
	BiomesDir string
	StoreDSN  string
	// DevGrants names biomes from BiomesDir approved with their default profile when they
	// have no grant yet (the demo's first start). Never for production.
	DevGrants []string
	// OperatorOrg is the org whose administrators act for the operator: they move the
	// lifecycle of the operator's biome store and read audit records of no org.
	OperatorOrg string
	// Name is the gateway's name in the Txn-Tokens it signs (iss and req_wl): its public
	// URL; "" is "xema".
	Name string
	// DecisionLog ships decisions in OPA's decision-log format: "stdout", "file:PATH" or an
	// http(s) URL; "" is off. DecisionLogMask erases those JSON pointers from each input.
	DecisionLog     string
	DecisionLogMask []string
	// PolicyDir holds the platform team's own Rego (package xema.custom).
	PolicyDir string
	// PolicyDirPoll is how often serve looks for changed Rego in PolicyDir (0: never).
	PolicyDirPoll time.Duration
	// ReloadEvery is how often the store's revision is polled so changes made through
	// another replica take effect here.
	ReloadEvery time.Duration
	// ApprovalTTL is how long a call held for approval may wait; 0 means approval.DefaultTTL.
	ApprovalTTL time.Duration
	// MaxPendingApprovals bounds the calls one subject of an org may have waiting for approval
	// (--max-pending-approvals); 0 means approval.DefaultMaxPending.
	MaxPendingApprovals int
	// Notify is who is told of held calls (--approval-webhook, --approval-chat).
	Notify notify.Config
	// PublicURL is the gateway's external base URL (--public-url, else its listen address):
	// connections' redirect URI and the console page a connect suggestion names hang off
	// it. "" leaves connections off: a registration with auth oauth is refused.
	PublicURL string
	// MCPResyncEvery is how often every external MCP server is synced; 0 is never (a pooled
	// session's tools/list_changed still triggers a sync).
	MCPResyncEvery time.Duration
	// EgressAllow are the loopback and private prefixes outbound calls may reach
	// (--egress-allow; the development issuer adds loopback). Link-local, metadata,
	// unspecified and multicast addresses are refused whatever it holds.
	EgressAllow []netip.Prefix
	// MCPStdio are the operator-declared stdio MCP servers (--mcp-stdio, --mcp-stdio-config):
	// the only command lines the gateway runs.
	MCPStdio []federation.StdioServer
	// UnauthAuditInterval is how long one aggregate record of unauthenticated attempts
	// (route, reason, source) stays open; 0 means unauth.DefaultInterval.
	UnauthAuditInterval time.Duration
	// Tokens mints the gateway's outbound service tokens (the server identity's); nil sends
	// none (a provider needing one is answered NO_SERVICE_TOKEN).
	Tokens runner.TokenSource
	// TokenExchange names the file of providers whose calls carry a token exchanged for the
	// caller's (internal/exchange); "" exchanges none.
	TokenExchange string
	// WrapTransport, when set, wraps every outbound transport (e.g. in client spans).
	WrapTransport func(http.RoundTripper) http.RoundTripper
	// SecretKeys is where the credential keyring comes from ($XEMA_SECRET_KEY or
	// $XEMA_SECRET_KEY_FILE); empty is DataDir/secret.key, created at first start.
	SecretKeys secretbox.Source
	// MasterKey wraps the per-deployment keys and the credential keyring file
	// (--master-key-file, $XEMA_MASTER_KEY or $XEMA_MASTER_KEY_FILE); with none, the
	// development default DataDir/master.key, generated at first start with a warning.
	MasterKey masterkey.Source
	// AuditRetain, when above 0, prunes audit records older than it (--audit-retain).
	AuditRetain time.Duration
	// Now is the approvals' clock (held calls' expiry, leases); nil is time.Now. Tests move it.
	Now func() time.Time
	// MaxInflight bounds the outbound calls running at once, MaxPerProvider those of one
	// provider (--max-inflight-calls, --max-inflight-per-provider); 0 bounds nothing.
	MaxInflight, MaxPerProvider int
	// Environments names environments beyond the defaults, NAME=KIND (--environments, the
	// config file's `environments: {prod: project}`): grants and tokens name them.
	Environments []string
}

// Environments are the named environments the gateway knows (the defaults and --environments).
func (a *App) Environments() grant.Environments { return a.envs }

// App is a running gateway.
type App struct {
	Store     store.Store
	Kernel    *kernel.Registry
	Catalog   *catalog.Catalog
	Policy    *policy.Engine
	Publisher *catalog.Publisher
	Gateway   *gateway.Gateway
	// Tools answers the meta-tools (search, describe, plan, preflight, explain, whoami).
	Tools *metatool.Tools
	// TxnTokens signs the trusted context of critical operations; the gateway's JWKS
	// publishes its keys.
	TxnTokens *txntoken.Signer
	// Idempotency keeps the answers of calls made with an idempotency key, in the store.
	Idempotency *idempotency.Keys
	// Bindings resolves connector capabilities through org-level provider bindings.
	Bindings  *binding.Service
	Approvals *approval.Service
	// Notify delivers the approval notifications of the store's outbox.
	Notify *notify.Deliverer
	// Federation registers and runs external MCP servers (internal/federation).
	Federation *federation.Federation
	// Connections holds the org's and persons' connections to OAuth-protected MCP servers
	// (internal/connection); nil without a PublicURL.
	Connections *connection.Service
	// Egress is the outbound policy every runner, connector and MCP client dials through;
	// HTTP is the one outbound client built on it (no redirects followed).
	Egress *egress.Policy
	HTTP   *http.Client

	envs     grant.Environments
	profiles grant.Profiles

	// Spool keeps outcomes, approval ends and idempotency answers the store could not take.
	Spool *spool.Spool
	// Audit is the one audit log of the process (the funnel's and the approvals' records:
	// one writer batches both); unauth aggregates unauthenticated attempts into it.
	Audit  *audit.Log
	unauth *unauth.Aggregator
	// outages is the outage log every part reports to and readiness reads.
	outages *outage.Tracker
	// Replica is this process's id in approval leases and the write probe.
	Replica string
	// KeysReady reports whether the identity provider's keys are available (set by serve).
	KeysReady func(ctx context.Context) error

	ready    readiness
	draining atomic.Bool

	decisions *decisionlog.Exporter // nil unless Config.DecisionLog
	// loops are the background loops goLoop started, each on loopCtx, which stopLoops ends.
	loops     sync.WaitGroup
	loopCtx   context.Context
	stopLoops context.CancelFunc
	// chainKeys are the audit chain keys, current first (a prune verifies and checkpoints under them).
	chainKeys [][]byte
	// counters are the rate and quota counters in memory on the embedded store (nil on
	// PostgreSQL, whose replicas share the store's rows): saved with each audit batch.
	counters *ratelimit.Memory
	dryRuns  chan struct{} // one grant dry run at a time

	cfg      Config
	mu       sync.Mutex // serializes rebuilds
	loadedAt int64
	// served is the data.xema the policy serves (the last Rebuild's), for reading who a
	// grant covers without compiling again.
	served atomic.Pointer[map[string]any]
}

// New opens the store, registers the kernel capabilities, loads the biomes directory and
// compiles the first policy bundle. Any failure is fatal: a gateway that cannot decide does
// not start.
func New(ctx context.Context, cfg Config) (*App, error) {
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir %s: %w", cfg.DataDir, err)
	}
	st, err := engine.Open(ctx, cfg.StoreDSN, cfg.DataDir)
	if err != nil {
		return nil, err
	}
	// First, before anything is written to the data directory: a start refused for want of
	// the master key leaves nothing behind.
	if cfg.MasterKey.DataDir == "" {
		cfg.MasterKey.DataDir = cfg.DataDir
	}
	master, err := openMaster(ctx, cfg.MasterKey, st)
	if err != nil {
		st.Close()
		return nil, err
	}
	eng, err := policy.New(ctx, policy.Options{ExtraDir: cfg.PolicyDir})
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("policy: %w", err)
	}
	stdio, err := federation.DeclareStdio(cfg.MCPStdio)
	if err != nil {
		st.Close()
		return nil, err
	}
	envs, err := grant.ParseEnvironments(cfg.Environments)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("--environments: %w", err)
	}
	a := &App{Store: st, Kernel: kernel.New(), Catalog: catalog.New(st), Policy: eng,
		envs: envs, profiles: grant.Builtin(), loadedAt: -1, cfg: cfg}
	a.loopCtx, a.stopLoops = context.WithCancel(context.Background())
	if a.Replica, err = replicaID(cfg.DataDir); err != nil {
		return nil, a.closeWith(err)
	}
	a.Egress = egress.New(cfg.EgressAllow)
	// Idle connections for as many calls as may run at once: no call beyond a smaller pool
	// pays a new connection to its provider.
	a.Egress.SizePools(cfg.MaxInflight, cfg.MaxPerProvider)
	a.HTTP = a.Egress.Client(nil)
	if cfg.WrapTransport != nil {
		a.HTTP.Transport = cfg.WrapTransport(a.HTTP.Transport)
	}
	keys, err := deploykeys.Load(ctx, st, master)
	if err != nil {
		return nil, a.closeWith(err)
	}
	a.chainKeys = keys.Chains
	if a.TxnTokens, err = txntoken.New(cmp.Or(cfg.Name, "xema"), keys.TxnTokens); err != nil {
		return nil, a.closeWith(err)
	}
	chain, err := audit.StartChain(ctx, st, keys.Chain)
	if err != nil {
		return nil, a.closeWith(err)
	}
	a.Audit = &audit.Log{Store: st, Chain: chain}
	limiter := &ratelimit.Limiter{Counter: st}
	if !engine.IsPostgres(cfg.StoreDSN) { // one process owns the SQLite file: its counters may live here
		if a.counters, err = ratelimit.LoadMemory(ctx, st, time.Now()); err != nil {
			return nil, a.closeWith(err)
		}
		a.Audit.Usage, limiter.Counter = a.counters, a.counters
	}
	// Opened only once the chained audit log exists: a spool drained by a failing start
	// (closeWith) writes its records through the chain too, never beside it.
	if a.Spool, err = spool.Open(cfg.DataDir, st); err != nil {
		return nil, a.closeWith(err)
	}
	a.Spool.AppendAudit = a.Audit.Append
	if cfg.DecisionLog != "" {
		if a.decisions, err = decisionlog.New(decisionlog.Options{Sink: cfg.DecisionLog, Mask: cfg.DecisionLogMask,
			Client: a.HTTP}); err != nil {
			return nil, a.closeWith(err)
		}
		a.Audit.Committed = a.decisions.Records
	}
	a.Publisher = &catalog.Publisher{Store: st, OperatorOrg: cfg.OperatorOrg, Kernel: a.Kernel, Envs: a.envs, Profiles: a.profiles,
		Changed: a.Rebuild, CheckURL: a.Egress.CheckURL}
	if a.Bindings, err = bindings(cfg.DataDir, cfg.SecretKeys, master, st, a.Egress, a.HTTP); err != nil {
		return nil, a.closeWith(err)
	}
	a.Publisher.HasBinding = a.Bindings.Serves
	if err := cfg.Notify.Validate(func(raw string) string { return a.Egress.CheckURL(raw, false) }); err != nil {
		return nil, a.closeWith(err)
	}
	a.Notify = &notify.Deliverer{Config: cfg.Notify, Store: st, HTTP: a.HTTP, Chat: a.Bindings, Replica: a.Replica, Now: cfg.Now}
	var notifier approval.Notifier // none unless someone is to be told: no events are queued
	if len(cfg.Notify.Webhooks)+len(cfg.Notify.Chats) > 0 {
		notifier = a.Notify
	}
	a.Publisher.Impact, a.dryRuns = a.grantImpact, make(chan struct{}, 1)
	if err := binding.Register(a.Kernel, a.Bindings); err != nil {
		return nil, a.closeWith(err)
	}
	if err := admin.Register(a.Kernel, a.Publisher); err != nil {
		return nil, a.closeWith(err)
	}
	fedOpts := federation.Options{Egress: a.Egress, Stdio: stdio, Secrets: a.Bindings.Vault}
	if cfg.PublicURL != "" {
		if a.Connections, err = connection.New(connection.Config{Store: st, Keyring: a.Bindings.Vault.Keys.Current,
			HTTP:      &http.Client{Transport: a.Egress.Transport(), CheckRedirect: egress.NoRedirect, Timeout: 15 * time.Second},
			PublicURL: cfg.PublicURL}); err != nil {
			return nil, a.closeWith(err)
		}
		if err := a.Connections.Register(a.Kernel); err != nil {
			return nil, a.closeWith(err)
		}
		fedOpts.Connections, fedOpts.ConnectURL = a.Connections, strings.TrimSuffix(cfg.PublicURL, "/")+ConnectionsPage
		a.Bindings.Connections, a.Bindings.ConnectURL = a.Connections, fedOpts.ConnectURL
	}
	a.Federation = federation.New(st, a.Rebuild, cfg.Tokens, fedOpts)
	providerTokens, err := a.providerTokens(ctx, cfg)
	if err != nil {
		return nil, a.closeWith(err)
	}
	if cfg.WrapTransport != nil {
		a.Federation.WrapTransport(cfg.WrapTransport)
	}
	if err := a.Federation.Register(a.Kernel); err != nil {
		return nil, a.closeWith(err)
	}
	// Built in order, no back-pointers: the funnel over the approval queue, then the
	// approval service over the funnel.
	a.outages = outage.New()
	a.unauth = &unauth.Aggregator{Audit: a.Audit, Revision: eng.Revision, Interval: cfg.UnauthAuditInterval}
	if a.Gateway, err = gateway.New(gateway.Deps{Catalog: a.Catalog, Policy: eng, Audit: a.Audit, Kernel: a.Kernel,
		Tokens: providerTokens, HTTP: a.HTTP, InputHashKey: keys.InputHash, TxnTokens: a.TxnTokens,
		Resolvers: []gateway.Resolver{a.Bindings, a.Federation}, Connections: gateway.ConnectionSources{a.Bindings, a.Federation}, Limiter: limiter,
		Approvals: &approval.Queue{Store: st, TTL: cfg.ApprovalTTL, Now: cfg.Now, Notify: notifier,
			MaxPending: cfg.MaxPendingApprovals}, Outbound: capacity.NewSlots(cfg.MaxInflight),
		PerProvider: capacity.NewProviderSlots(cfg.MaxPerProvider), Unauth: a.unauth, Spool: a.Spool, Outages: a.outages}); err != nil {
		return nil, a.closeWith(err)
	}
	a.Idempotency = &idempotency.Keys{Funnel: a.Gateway, Store: st, Spool: a.Spool, Outages: a.outages}
	if a.Tools, err = metatool.New(metatool.Deps{Catalog: a.Catalog, Policy: eng, Runners: a.Gateway, CursorKey: keys.Cursor, Outages: a.outages}); err != nil {
		return nil, a.closeWith(err)
	}
	a.Approvals = &approval.Service{Store: st, Policy: eng, Runner: a.Gateway, Audit: a.Audit, Catalog: a.Catalog, Replica: a.Replica, Spool: a.Spool,
		Now: cfg.Now, Notify: notifier}
	a.Publisher.Revoked = func(ctx context.Context, g store.Grant) error {
		_, err := a.Approvals.WithdrawRevoked(ctx, g)
		return err
	}
	if err := approval.Register(a.Kernel, a.Approvals); err != nil {
		return nil, a.closeWith(err)
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	if err := insight.Register(a.Kernel, &insight.Service{Store: st, Catalog: a.Catalog, Revision: eng.Revision,
		Covering: a.covering, OperationReads: a.Tools.OperationReads, Now: now}); err != nil {
		return nil, a.closeWith(err)
	}
	if err := a.publishKernel(ctx); err != nil {
		return nil, a.closeWith(err)
	}
	if cfg.BiomesDir != "" {
		a.loadBiomes(ctx, cfg.BiomesDir)
	}
	if err := a.devGrants(ctx, cfg.DevGrants); err != nil {
		return nil, a.closeWith(err)
	}
	if err := a.Rebuild(ctx); err != nil {
		return nil, a.closeWith(err)
	}
	if err := a.recoverAtStart(ctx); err != nil {
		return nil, a.closeWith(err)
	}
	return a, nil
}

// openMaster opens the master key of src. The development default, DATA_DIR/master.key, is
// generated only for a store holding no wrapped key: against an existing deployment a new key
// opens none of its keys, and left behind it would pass for the deployment's own at the
// next start. Then nothing is created and the error names the file and the key wanted.
func openMaster(ctx context.Context, src masterkey.Source, st store.Store) (masterkey.Wrapper, error) {
	entries, err := st.ListDeploymentKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("master key: %w", err)
	}
	var ids []string
	for _, e := range entries {
		if id := masterkey.WrappedKeyID(e.Secret); id != "" && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	w, err := src.Open(len(ids) == 0)
	if errors.Is(err, masterkey.ErrNoMasterKey) && len(ids) > 0 && src.Inline == "" && src.File == "" {
		return nil, fmt.Errorf("%w: %s does not exist, and this store's keys are wrapped by master key %s: a new key would open "+
			"none of them, so none was created; put that key's file at %s, or give it with --master-key-file, %s or %s",
			masterkey.ErrNoMasterKey, src.Default(), strings.Join(ids, ", "), src.Default(), masterkey.EnvKeyFile, masterkey.EnvKey)
	}
	return w, err
}

// ConnectionsPage is the console's Connections page below the public URL.
const ConnectionsPage = "/console/connections"

// bindings opens the credential keyring (src, or a key file created under dataDir at first
// start) and the binding service over st, calling providers with hc.
func bindings(dataDir string, src secretbox.Source, master masterkey.Wrapper, st store.BindingStore, pol *egress.Policy,
	hc *http.Client) (*binding.Service, error) {
	keys, err := credential.OpenKeys(dataDir, src, master)
	if err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	return &binding.Service{Store: st, Vault: &credential.Vault{Store: st, Keys: keys}, Providers: binding.Providers(),
		HTTP: hc, Egress: pol}, nil
}

func (a *App) closeWith(err error) error {
	if a.Spool != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = a.Spool.Close(ctx)
		cancel()
	}
	if a.Audit != nil {
		a.Audit.Close()
	}
	a.Store.Close()
	return err
}

// Close ends the federated servers' sessions, commits what the audit log and the spool hold,
// and releases the store last.
func (a *App) Close() error {
	a.stopAndWaitLoops() // no loop uses what is closed below
	a.Federation.Close()
	if a.unauth != nil {
		a.unauth.Close() // open aggregate buckets write their counts
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = a.Spool.Close(ctx) // through the audit log; what the store still refuses stays in the file for the next start
	cancel()
	if a.Audit != nil {
		a.Audit.Close() // queued audit records commit before the store closes
	}
	if a.counters != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := a.counters.Save(ctx, a.Store); err != nil {
			slog.Error("rate counters not saved at shutdown: the calls they counted since the last audit batch are forgotten", "err", err)
		}
		cancel()
	}
	if a.decisions != nil {
		a.decisions.Close() // after the audit log: its last batch is shipped too
	}
	return a.Store.Close()
}

// publishKernel stores the Go-registered capabilities as the built-in biome, published at
// once: they are held through their humanBaseline, not through grants.
func (a *App) publishKernel(ctx context.Context) error {
	accepted, skipped := a.Kernel.Scan()
	for _, s := range skipped {
		slog.Error("kernel capability skipped: partial or invalid descriptor", "ref", s.Ref, "reason", s.Reason)
	}
	// In ref order: the registrations come in whatever order the packages registered them (some
	// over a map), and the version below hashes them in order, so a restart must not reorder it.
	slices.SortFunc(accepted, func(x, y kernel.Accepted) int {
		return cmp.Compare(x.Contribution.Manifest.Ref, y.Contribution.Manifest.Ref)
	})
	b := &manifest.Biome{ID: KernelBiome, DefaultProfile: "unrestricted"}
	h := sha256.New()
	for _, reg := range accepted {
		b.Contributions = append(b.Contributions, reg.Contribution)
		b.RequiresCapabilities = append(b.RequiresCapabilities, reg.Contribution.Manifest.Ref)
		h.Write(reg.Raw)
	}
	sort.Strings(b.RequiresCapabilities)
	b.Version = "0.0.0+" + hex.EncodeToString(h.Sum(nil))[:12]
	manifestRaw, err := json.Marshal(b)
	if err != nil {
		return fmt.Errorf("kernel biome: %w", err)
	}
	caps := make([]store.Capability, 0, len(b.Contributions))
	for _, c := range b.Contributions {
		m, err := json.Marshal(c.Manifest)
		if err != nil {
			return fmt.Errorf("kernel capability %s: %w", c.Manifest.Ref, err)
		}
		caps = append(caps, store.Capability{Ref: c.Manifest.Ref, BiomeID: KernelBiome, BiomeVersion: b.Version,
			Manifest: m, RunnerKind: "kernel", Lifecycle: store.LifecyclePublished, UpdatedAt: time.Now().UTC()})
	}
	bv := store.BiomeVersion{ID: KernelBiome, Version: b.Version, Manifest: manifestRaw,
		Contributions: json.RawMessage("[]"), ContentHash: b.Version, DigestHash: b.Version, Digest: json.RawMessage("{}"),
		CreatedAt: time.Now().UTC()}
	if err := a.Store.PublishBiome(ctx, bv, caps); err != nil {
		return fmt.Errorf("publish kernel capabilities: %w", err)
	}
	return nil
}

// loadBiomes publishes every biome directory under dir. A biome that fails validation is
// reported and skipped as a whole, never half-registered.
func (a *App) loadBiomes(ctx context.Context, dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		slog.Error("biomes directory unreadable; no biome loaded", "dir", dir, "err", err)
		return
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		path := filepath.Join(dir, e.Name())
		b, problems, err := manifest.LoadDir(path)
		if err != nil || len(problems) > 0 {
			slog.Error("biome skipped: invalid", "dir", path, "err", err, "problems", len(problems))
			for _, p := range problems {
				slog.Error("biome problem", "dir", path, "file", p.File, "path", p.Path, "message", p.Message)
			}
			continue
		}
		if b.ID == demo.BiomeID {
			// The demo's in-process runners exist only where the demo biome is loaded.
			if err := demo.Serve(a.Kernel); err != nil {
				slog.Error("biome skipped: its runners", "dir", path, "err", err)
				continue
			}
		}
		res, err := a.Publisher.SubmitDir(ctx, b)
		if err != nil {
			slog.Error("biome skipped: not published", "dir", path, "err", err)
			continue
		}
		slog.Info("biome loaded", "id", res.BiomeID, "version", res.Version, "digest", res.Digest.Hash)
	}
}

// devGrants approves each named biome's newest version with its default profile, unless a
// grant for the biome exists already.
func (a *App) devGrants(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	grants, err := a.Store.ListGrants(ctx)
	if err != nil {
		return fmt.Errorf("dev grants: %w", err)
	}
	granted := map[string]bool{}
	for _, g := range grants {
		granted[g.BiomeID] = true
	}
	for _, id := range ids {
		if granted[id] {
			continue
		}
		versions, err := a.Store.ListBiomeVersions(ctx, id)
		if err != nil || len(versions) == 0 {
			return fmt.Errorf("dev grant: biome %q is not loaded", id)
		}
		bv := versions[len(versions)-1]
		req, _ := json.Marshal(map[string]string{"biomeId": id, "version": bv.Version, "digestHash": bv.DigestHash})
		if _, err := a.Publisher.Install(ctx, req, identity.DefaultOrg, "dev-grant"); err != nil {
			return fmt.Errorf("dev grant %s: %w", id, err)
		}
		slog.Warn("development grant recorded", "biome", id, "version", bv.Version)
	}
	return nil
}

// Rebuild reloads the catalog and compiles a new policy bundle from the store. A bundle that
// fails to compile never replaces the serving one.
func (a *App) Rebuild(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	snap, err := a.Catalog.Reload(ctx)
	if err != nil {
		return err
	}
	data, rev, err := a.compile(ctx, snap)
	if err != nil {
		return err
	}
	if err := a.Policy.Load(ctx, data, rev); err != nil {
		return fmt.Errorf("rebuild: %w", err)
	}
	a.served.Store(&data)
	a.loadedAt = snap.Revision
	return nil
}

// covering is who the serving policy data lets call ref in org: its grants of ref.
func (a *App) covering(org, ref string) []grant.GrantData {
	data := a.served.Load()
	if data == nil {
		return nil
	}
	return grant.Covering(*data, org, ref)
}

// compile builds data.xema at snap, with extra grants counted as if recorded.
func (a *App) compile(ctx context.Context, snap *catalog.Snapshot, extra ...store.Grant) (map[string]any, string, error) {
	return compileData(ctx, a.Catalog, snap, a.envs, a.profiles, extra...)
}

// grantImpact replays the calls candidate's org recorded since with the serving policy over
// the data candidate would make (a grant's dry run). Nothing is stored.
func (a *App) grantImpact(ctx context.Context, candidate store.Grant, since time.Time) (catalog.Impact, error) {
	// A dry run replays up to MaxDryRunDecisions with the full policy: one at a time, so a
	// flood of them cannot take the gateway's CPU from its calls.
	select {
	case a.dryRuns <- struct{}{}:
		defer func() { <-a.dryRuns }()
	default:
		e := fault.New(fault.Unavailable, catalog.CodeDryRunBusy, "another grant dry run is running; retry shortly")
		e.NotRun = true // nothing was replayed
		return catalog.Impact{}, e
	}
	data, rev, err := a.compile(ctx, a.Catalog.Snapshot(), candidate)
	if err != nil {
		return catalog.Impact{}, err
	}
	eng, err := a.Policy.WithData(ctx, data, rev+"+dry-run")
	if err != nil {
		return catalog.Impact{}, fmt.Errorf("dry run: %w", err)
	}
	rep, err := replay.Run(ctx, a.Store, eng, replay.Window{Since: since, Org: candidate.Org, Limit: MaxDryRunDecisions})
	if err != nil {
		return catalog.Impact{}, fmt.Errorf("dry run: %w", err)
	}
	imp := catalog.Impact{Considered: rep.Considered, AllowToDeny: rep.AllowToDeny, DenyToAllow: rep.DenyToAllow,
		AllowToHeld: rep.AllowToHeld, Since: since.UTC().Format(time.RFC3339), Truncated: rep.Truncated, PrunedBefore: rep.PrunedBefore}
	imp.Losing, imp.Recent = losing(rep.Changes)
	return imp, nil
}

// MaxImpactCallers and MaxImpactCalls bound the callers and calls a dry run names.
const (
	MaxImpactCallers = 20
	MaxImpactCalls   = 10
)

// losing names, of a replay's changes (oldest first), the callers whose calls would now be denied (most
// calls first) and the newest of those calls.
func losing(changes []replay.Change) ([]catalog.ImpactCaller, []catalog.ImpactCall) {
	calls := map[string]int{}
	var recent []catalog.ImpactCall
	for _, c := range changes {
		if !c.Before.Allow || c.After.Allow {
			continue
		}
		calls[c.Subject]++
		recent = append(recent, catalog.ImpactCall{AuditID: c.AuditID, Ref: c.Ref, Subject: c.Subject, Environment: c.Environment, Time: c.Time})
	}
	callers := make([]catalog.ImpactCaller, 0, len(calls))
	for s, n := range calls {
		callers = append(callers, catalog.ImpactCaller{Subject: s, Calls: n})
	}
	slices.SortFunc(callers, func(a, b catalog.ImpactCaller) int {
		return cmp.Or(cmp.Compare(b.Calls, a.Calls), cmp.Compare(a.Subject, b.Subject))
	})
	slices.Reverse(recent) // the replay reads the window oldest first
	return callers[:min(len(callers), MaxImpactCallers)], recent[:min(len(recent), MaxImpactCalls)]
}

// MaxDryRunDecisions bounds the recorded calls a grant's dry run replays (the oldest of the
// window first); the impact says when it stopped there.
const MaxDryRunDecisions = 20_000

// PolicyData compiles data.xema from st as a gateway serving it now with the named
// environments envs would (and the built-in profiles), for tools that decide without a
// gateway (xema replay): a deployment's environments beyond the defaults must be named, or
// its recorded calls in them would replay as denied in an undefined environment.
func PolicyData(ctx context.Context, st catalog.Reader, envs grant.Environments) (map[string]any, string, error) {
	cat := catalog.New(st)
	snap, err := cat.Reload(ctx)
	if err != nil {
		return nil, "", err
	}
	return compileData(ctx, cat, snap, envs, grant.Builtin())
}

func compileData(ctx context.Context, cat *catalog.Catalog, snap *catalog.Snapshot, envs grant.Environments,
	profiles grant.Profiles, extra ...store.Grant) (map[string]any, string, error) {
	in, err := cat.CompileInput(ctx, snap, extra...)
	if err != nil {
		return nil, "", fmt.Errorf("compile policy data: %w", err)
	}
	in.Environments, in.Profiles, in.Revision = envs, profiles, fmt.Sprintf("r%d", snap.Revision)
	data, err := grant.Compile(in)
	if err != nil {
		return nil, "", fmt.Errorf("compile policy data: %w", err)
	}
	return data, in.Revision, nil
}

// Watch rebuilds whenever policy data changes through another replica, until ctx ends. On
// PostgreSQL it listens on channel xema_policy_revision, which the store's trigger notifies
// in the transaction of every change, and catches up after each (re)connection, since
// notifications sent meanwhile are lost; a lost connection is retried every `every`. On
// SQLite (one process) it polls the revision every `every`. A store error leaves the serving
// bundle in place.
func (a *App) Watch(ctx context.Context, every time.Duration) {
	if sub, ok := a.Store.(store.RevisionSubscriber); ok {
		a.listen(ctx, sub, every)
		return
	}
	periodic.Every(ctx, every, func(time.Time) { a.catchUp(ctx) })
}

// PruneRateCounters deletes rate-limit and quota counters of ended windows every `every`,
// until ctx ends. Replicas may all prune: the deletes are bounded and idempotent. Counters
// held in memory are pruned too, and what no audit batch carried yet is saved.
func (a *App) PruneRateCounters(ctx context.Context, every time.Duration) {
	periodic.Every(ctx, every, func(now time.Time) {
		if a.counters != nil {
			if _, err := ratelimit.Prune(ctx, a.counters, now); err != nil {
				slog.Warn("in-memory rate counter prune failed", "err", err)
			}
			if err := a.counters.Save(ctx, a.Store); err != nil && ctx.Err() == nil {
				slog.Warn("rate counter save failed; retrying with the next audit batch", "err", err)
			}
		}
		n, err := ratelimit.Prune(ctx, a.Store, now)
		if err != nil && ctx.Err() == nil {
			slog.Warn("rate counter prune failed; retrying next tick", "pruned", n, "err", err)
		} else if n > 0 {
			slog.Info("pruned rate counters of ended windows", "rows", n)
		}
	})
}

// PruneAudit removes the audit records older than the retention every `every`, until ctx
// ends (--audit-retain): in small batches, so appends go on. Replicas may all prune: the
// checkpoints never move back and the deletes are idempotent.
func (a *App) PruneAudit(ctx context.Context, every time.Duration) {
	if a.cfg.AuditRetain <= 0 {
		return
	}
	periodic.Every(ctx, every, func(now time.Time) { a.pruneAudit(ctx, now) })
}

// MaintainAuditPartitions keeps the audit log's partitions of the next
// store.AuditPartitionsAhead days created, every `every`, on a store partitioned by time
// (PostgreSQL). Replicas may all do it: each creates only the days missing, taking turns. A
// failure only costs speed: appends for a day without its partition land in the DEFAULT one.
func (a *App) MaintainAuditPartitions(ctx context.Context, every time.Duration) {
	p, ok := a.Store.(store.AuditPartitioner)
	if !ok {
		return
	}
	periodic.Every(ctx, every, func(now time.Time) {
		n, err := p.EnsureAuditPartitions(ctx, now, now.Add((store.AuditPartitionsAhead-1)*24*time.Hour))
		switch {
		case err != nil && ctx.Err() == nil:
			slog.Warn("audit partitions not created; appends go to the default partition meanwhile", "err", err)
		case n > 0:
			slog.Info("created audit partitions ahead of time", "partitions", n)
		}
	})
}

// pruneAudit is one tick of PruneAudit.
func (a *App) pruneAudit(ctx context.Context, now time.Time) {
	res, err := audit.Prune(ctx, a.Store, a.chainKeys, audit.PruneOptions{Before: now.Add(-a.cfg.AuditRetain), Now: now})
	switch {
	case errors.Is(err, store.ErrConflict):
		slog.Debug("audit prune: another replica pruned further meanwhile", "err", err)
	case err != nil && ctx.Err() == nil:
		slog.Error("audit prune failed; retrying next tick", "deleted", res.Deleted, "err", err)
	case res.Deleted > 0:
		slog.Info("pruned audit records beyond the retention", "retain", a.cfg.AuditRetain, "records", res.Deleted, "chains", res.Chains)
	}
}

// listen keeps a revision subscription, resubscribing every retry until ctx ends.
func (a *App) listen(ctx context.Context, sub store.RevisionSubscriber, retry time.Duration) {
	for {
		err := sub.SubscribeRevisions(ctx, func() { a.catchUp(ctx) }, func(rev int64) {
			a.mu.Lock()
			seen := rev >= 0 && rev <= a.loadedAt
			a.mu.Unlock()
			if !seen { // a burst of bumps is rebuilt once: the first rebuild loads the newest
				a.catchUp(ctx)
			}
		})
		if ctx.Err() != nil {
			return
		}
		slog.Warn("policy change listener lost its connection; reconnecting", "err", err, "retry", retry)
		select {
		case <-ctx.Done():
			return
		case <-time.After(retry):
		}
	}
}

// catchUp rebuilds when the store's revision differs from the loaded one.
func (a *App) catchUp(ctx context.Context) {
	rev, err := a.Store.Revision(ctx)
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			slog.Warn("store revision read failed", "err", err)
		}
		return
	}
	a.mu.Lock()
	stale := rev != a.loadedAt
	a.mu.Unlock()
	if stale {
		if err := a.Rebuild(ctx); err != nil {
			slog.Error("policy rebuild failed; keeping the serving bundle", "err", err)
		}
	}
}

// providerTokens is the token source of the http runners: the gateway's own, or with
// cfg.TokenExchange a token exchanged for the caller's for the providers it names. The token
// endpoints are checked as URLs that receive a credential: the caller's token is sent there.
func (a *App) providerTokens(ctx context.Context, cfg Config) (runner.TokenSource, error) {
	if cfg.TokenExchange == "" {
		return cfg.Tokens, nil
	}
	c, err := exchange.Load(cfg.TokenExchange, func(raw string) string { return a.Egress.CheckURL(raw, true) })
	if err != nil {
		return nil, err
	}
	return exchange.New(ctx, c, cfg.Tokens, a.HTTP)
}
