// Package federation registers external MCP servers as capability providers (spec:
// "External MCP servers as capability providers"): each tool of a server's tools/list becomes
// the capability <provider-id>:<tool-name>@1, runner kind mcp-external, seeded under a biome
// whose id is the provider id, so that approving its digest (POST /v1/grants) publishes the
// tools. Every tool's definition is pinned; a re-sync that finds a changed definition moves
// that capability back to seeded until a new digest is approved.
package federation

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"sort"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/xemahq/xema/internal/catalog"
	"github.com/xemahq/xema/internal/connection"
	"github.com/xemahq/xema/internal/egress"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/grant"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/inputschema"
	"github.com/xemahq/xema/internal/kernel"
	"github.com/xemahq/xema/internal/manifest"
	"github.com/xemahq/xema/internal/periodic"
	"github.com/xemahq/xema/internal/runner"
	"github.com/xemahq/xema/internal/store"
)

// Refs of the admin capabilities, the runner kind of federated tools, transports and auth.
const (
	RefRegister = "mcp-server:register@1"
	RefSync     = "mcp-server:sync@1"
	RefList     = "mcp-server:list@1"

	RunnerKind       = "mcp-external"
	TransportHTTP    = "streamable-http"
	TransportStdio   = "stdio"
	AuthServiceToken = "service-token"

	// DefaultTimeout bounds tools/list at registration and every tools/call.
	DefaultTimeout = 10 * time.Second
)

//go:embed contributions/*.json
var descriptors embed.FS

// Contributions are the kernel capabilities' descriptors (contributions/*.json): the OpenAPI
// document takes their inputSchema and outputSchema as the routes' bodies.
var Contributions fs.FS = descriptors

// Store is the store as the federation uses it: the server records, and the catalog and
// biome versions a registration or sync is checked against (store.Store).
type Store interface {
	store.FederationStore
	GetBiomeVersion(ctx context.Context, id, version string) (store.BiomeVersion, error)
	BiomeOwners(ctx context.Context) (map[string]string, error)
	ListBiomeVersions(ctx context.Context, id string) ([]store.BiomeVersion, error)
	ListCapabilities(ctx context.Context) ([]store.Capability, error)
}

// Federation registers, syncs and runs external MCP servers.
type Federation struct {
	store   Store
	changed func(ctx context.Context) error
	dialer  *dialer
	pool    *pool
	egress  *egress.Policy
	stdio   map[string]StdioServer
	// conns holds the connections of oauth servers; secrets opens a registration's client
	// secret; connectURL is the console page a denial sends the owner to (Options).
	conns      Connections
	secrets    Secrets
	connectURL string

	mu      sync.Mutex // serializes registrations and syncs of this replica
	cacheMu sync.Mutex
	cache   map[string]known // by provider id, the last server record read

	// Re-syncs a server's list_changed asks for run under life, debounce after the last one.
	life      context.Context
	stop      context.CancelFunc
	debounce  time.Duration
	pendingMu sync.Mutex
	pending   map[string]*time.Timer // by provider id
}

// SyncActor is the actor of the re-syncs the gateway starts itself (list_changed, periodic).
const SyncActor = "service:xema-gateway"

// ListChangedDebounce is how long after a server's last notifications/tools/list_changed
// its re-sync starts: a server adding several tools is synced once.
const ListChangedDebounce = time.Second

// New returns a federation over st. changed rebuilds catalog and policy after a write (the
// Publisher's Changed); tokens is the gateway's outbound token source; opts holds the
// egress policy and the operator-declared stdio servers.
func New(st Store, changed func(ctx context.Context) error, tokens runner.TokenSource, opts Options) *Federation {
	life, stop := context.WithCancel(context.Background())
	if opts.Egress == nil {
		opts.Egress = egress.New(nil)
	}
	f := &Federation{store: st, changed: changed, cache: map[string]known{}, egress: opts.Egress, stdio: opts.Stdio,
		conns: opts.Connections, secrets: opts.Secrets, connectURL: opts.ConnectURL,
		life: life, stop: stop, debounce: ListChangedDebounce, pending: map[string]*time.Timer{}}
	f.dialer = newDialer(tokens, f.toolsChanged)
	f.dialer.transport = opts.Egress.Transport()
	f.dialer.stdio = opts.Stdio
	f.pool = &pool{d: f.dialer, by: map[string]*pooled{}}
	return f
}

// Close cancels pending re-syncs and ends every pooled session (and so every stdio server
// process).
func (f *Federation) Close() {
	f.stop()
	f.pendingMu.Lock()
	for id, t := range f.pending {
		t.Stop()
		delete(f.pending, id)
	}
	f.pendingMu.Unlock()
	f.pool.close()
}

// toolsChanged hears a pooled session's notifications/tools/list_changed and schedules a
// re-sync of its server. Only a pooled session is heard: a server no call has reached yet
// is left to the periodic re-sync.
func (f *Federation) toolsChanged(cs *mcp.ClientSession) {
	provider, ok := f.pool.provider(cs)
	if !ok {
		return
	}
	f.pendingMu.Lock()
	defer f.pendingMu.Unlock()
	if f.life.Err() != nil {
		return
	}
	if t, ok := f.pending[provider]; ok {
		t.Reset(f.debounce)
		return
	}
	f.pending[provider] = time.AfterFunc(f.debounce, func() {
		f.pendingMu.Lock()
		delete(f.pending, provider)
		f.pendingMu.Unlock()
		f.resync(f.life, provider, "tools/list_changed")
	})
}

// ResyncEvery syncs every registered server each period until ctx ends; every <= 0 is off.
func (f *Federation) ResyncEvery(ctx context.Context, every time.Duration) {
	if every <= 0 {
		return
	}
	periodic.Every(ctx, every, func(time.Time) {
		servers, err := f.store.ListMCPServers(ctx)
		if err != nil {
			slog.Warn("periodic mcp re-sync: list servers", "err", err)
			return
		}
		for _, s := range servers {
			f.resync(ctx, s.ProviderID, "periodic")
		}
	})
}

// resync runs Sync as the gateway itself and logs the outcome; changed tools go back to
// seeded exactly as with POST /v1/mcp-servers/{id}/sync.
func (f *Federation) resync(ctx context.Context, provider, trigger string) {
	res, err := f.Sync(ctx, provider, SyncActor)
	if err != nil {
		if ctx.Err() == nil {
			slog.Warn("mcp re-sync failed", "provider", provider, "trigger", trigger, "err", err)
		}
		return
	}
	if res.Changed {
		slog.Info("mcp server re-synced", "provider", provider, "trigger", trigger, "version", res.Server.Version,
			"added", res.Added, "redefined", res.Redefined, "removed", res.Removed)
	}
}

// Register queues the admin capabilities on reg.
func (f *Federation) Register(reg *kernel.Registry) error {
	handlers := map[string]kernel.Handler{
		"contributions/mcp-server-register.json": func(ctx context.Context, call kernel.Call) (any, error) {
			var req Registration
			if err := json.Unmarshal(call.Input, &req); err != nil {
				return nil, fmt.Errorf("decode validated input: %w", err)
			}
			return f.RegisterServer(ctx, req, call.Exec.Org, call.Exec.Subject.Ref)
		},
		"contributions/mcp-server-sync.json": func(ctx context.Context, call kernel.Call) (any, error) {
			var req struct {
				ProviderID string `json:"providerId"`
			}
			if err := json.Unmarshal(call.Input, &req); err != nil {
				return nil, fmt.Errorf("decode validated input: %w", err)
			}
			if err := f.mine(ctx, req.ProviderID, call.Exec.Org); err != nil {
				return nil, err
			}
			return f.Sync(ctx, req.ProviderID, call.Exec.Subject.Ref)
		},
		"contributions/mcp-server-list.json": func(ctx context.Context, call kernel.Call) (any, error) {
			return f.List(ctx, call.Exec.Org)
		},
	}
	return reg.RegisterFiles(descriptors, handlers)
}

// Registration is the body of POST /v1/mcp-servers.
type Registration struct {
	ProviderID string `json:"providerId"`
	Transport  string `json:"transport"`
	URL        string `json:"url,omitempty"`
	// Command, Args and Env are refused: a stdio server is declared by the operator and
	// registered by its id (ProviderID). They are decoded only to be named in the 400.
	Command   json.RawMessage   `json:"command,omitempty"`
	Args      json.RawMessage   `json:"args,omitempty"`
	Env       json.RawMessage   `json:"env,omitempty"`
	Auth      *RegistrationAuth `json:"auth,omitempty"`
	TimeoutMs int               `json:"timeoutMs,omitempty"`
}

// RegistrationAuth is a registration's auth: service-token (the gateway's own token), or
// oauth (a connection's: the org's one account, or each person's own).
type RegistrationAuth struct {
	Kind            string   `json:"kind"`
	Owner           string   `json:"owner,omitempty"`
	ClientID        string   `json:"clientId,omitempty"`
	ClientSecretRef string   `json:"clientSecretRef,omitempty"`
	Scopes          []string `json:"scopes,omitempty"`
}

// ToolView is one pinned tool with its capability's lifecycle.
type ToolView struct {
	Ref       string `json:"ref"`
	Name      string `json:"name"`
	Pin       string `json:"pin"`
	Lifecycle string `json:"lifecycle"`
}

// ServerView is a registered server as answered (no credential: auth is only its kind).
type ServerView struct {
	ProviderID string `json:"providerId"`
	Transport  string `json:"transport"`
	URL        string `json:"url,omitempty"`
	// Declared says a stdio server is one the operator declared on this gateway (its
	// command line is the operator's and is not answered).
	Declared     bool       `json:"declared,omitempty"`
	Auth         string     `json:"auth,omitempty"`
	TimeoutMs    int        `json:"timeoutMs"`
	Version      string     `json:"version"`
	Tools        []ToolView `json:"tools"`
	RegisteredBy string     `json:"registeredBy"`
	RegisteredAt string     `json:"registeredAt"`
	SyncedAt     string     `json:"syncedAt"`
}

// SyncResult answers a registration or a sync. Digest is what an org admin approves with
// POST /v1/grants {biomeId: providerId, version, digestHash: digest.hash}; nil when a sync
// found nothing changed.
type SyncResult struct {
	Server    ServerView    `json:"server"`
	Changed   bool          `json:"changed"`
	Added     []string      `json:"added"`
	Redefined []string      `json:"redefined"`
	Removed   []string      `json:"removed"`
	Digest    *grant.Digest `json:"digest,omitempty"`
}

// server checks a registration and turns it into the record it would store. A stdio
// registration stores no command line: the declaration of its id is read at each connection.
func (f *Federation) server(r Registration, by string, now time.Time) (store.MCPServer, error) {
	srv := store.MCPServer{ProviderID: r.ProviderID, Transport: r.Transport, URL: r.URL,
		TimeoutMs: r.TimeoutMs, Generation: 1, RegisteredBy: by, RegisteredAt: now, SyncedAt: now}
	if srv.TimeoutMs == 0 {
		srv.TimeoutMs = int(DefaultTimeout / time.Millisecond)
	}
	if r.Auth != nil {
		srv.Auth = r.Auth.Kind
	}
	bad := func(path, msg string) error {
		return invalidServer(path, msg)
	}
	for _, f := range []struct {
		path string
		raw  json.RawMessage
	}{{"/command", r.Command}, {"/args", r.Args}, {"/env", r.Env}} {
		if len(f.raw) > 0 {
			return srv, bad(f.path, "the API never takes a command line: stdio servers are declared by the operator "+
				"(xema serve --mcp-stdio ID=COMMAND or --mcp-stdio-config) and registered by providerId")
		}
	}
	switch r.Transport {
	case TransportHTTP:
		u, err := url.Parse(r.URL)
		switch {
		case r.URL == "":
			return srv, bad("/url", "a streamable-http server needs url")
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			return srv, bad("/url", "url must be an absolute http(s) URL")
		case u.User != nil:
			return srv, bad("/url", "url must not carry credentials; use auth")
		}
		if msg := f.egress.CheckURL(r.URL, srv.Auth == AuthServiceToken || srv.Auth == AuthOAuth); msg != "" {
			return srv, bad("/url", "url "+msg)
		}
	case TransportStdio:
		if _, ok := f.stdio[r.ProviderID]; !ok {
			return srv, bad("/providerId", fmt.Sprintf("no stdio MCP server %q is declared on this gateway "+
				"(the operator declares them with xema serve --mcp-stdio or --mcp-stdio-config)", r.ProviderID))
		}
		switch {
		case r.URL != "":
			return srv, bad("/url", "url is for streamable-http servers only")
		case srv.Auth != "":
			return srv, bad("/auth", "auth applies to streamable-http servers only")
		}
	default:
		return srv, bad("/transport", "transport must be streamable-http or stdio")
	}
	if srv.Auth != AuthOAuth && r.Auth != nil && (r.Auth.Owner != "" || r.Auth.ClientID != "" || r.Auth.ClientSecretRef != "" || len(r.Auth.Scopes) > 0) {
		return srv, bad("/auth", "owner, clientId, clientSecretRef and scopes are for auth kind oauth only")
	}
	return srv, nil
}

func invalidServer(path, msg string) error {
	return &fault.Error{Kind: fault.Invalid, Code: CodeInvalidServer, Message: path + ": " + msg,
		Violations: []inputschema.Violation{{Path: path, Message: msg}}}
}

// RegisterServer registers a new server: tools/list within the timeout, every tool
// translated, the whole set seeded in one transaction, or nothing stored.
// The server, and the biome id its tools are published under, belong to org.
func (f *Federation) RegisterServer(ctx context.Context, req Registration, org, by string) (*SyncResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	srv, err := f.server(req, by, time.Now().UTC())
	if err != nil {
		return nil, err
	}
	srv.Org = org
	if _, err := f.store.GetMCPServer(ctx, srv.ProviderID); err == nil {
		return nil, fault.New(fault.Conflict, CodeServerExists, "MCP server %q is already registered; sync it instead", srv.ProviderID)
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("register %s: %w", srv.ProviderID, err)
	}
	if versions, err := f.store.ListBiomeVersions(ctx, srv.ProviderID); err != nil {
		return nil, fmt.Errorf("register %s: %w", srv.ProviderID, err)
	} else if len(versions) > 0 {
		return nil, fault.New(fault.Conflict, CodeProviderTaken, "provider id %q is already a biome id", srv.ProviderID)
	}
	if srv.Auth == AuthOAuth {
		// No connection exists yet to list the tools with: the server is stored without
		// them, and the first connection's sync seeds them (connect, then sync).
		if err := f.discover(ctx, req, &srv); err != nil {
			return nil, err
		}
		return f.save(ctx, srv, nil, nil, map[string]store.Capability{}, by)
	}
	listed, err := f.dialer.listTools(ctx, srv)
	if err != nil {
		return nil, err
	}
	tools, err := translate(srv.ProviderID, listed)
	if err != nil {
		return nil, err
	}
	return f.save(ctx, srv, nil, tools, map[string]store.Capability{}, by)
}

// mine answers another org's server (or none) as an unknown one.
func (f *Federation) mine(ctx context.Context, providerID, org string) error {
	owners, err := f.store.BiomeOwners(ctx)
	if err != nil {
		return fmt.Errorf("mcp server %s: %w", providerID, err)
	}
	if owner, ok := owners[providerID]; !ok || owner != org {
		return fault.New(fault.NotFound, CodeUnknownServer, "no MCP server %q is registered", providerID)
	}
	return nil
}

// Sync re-reads a registered server's tools/list and applies the differences (see package doc).
func (f *Federation) Sync(ctx context.Context, providerID, by string) (*SyncResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	old, err := f.store.GetMCPServer(ctx, providerID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fault.New(fault.NotFound, CodeUnknownServer, "no MCP server %q is registered", providerID)
	}
	if err != nil {
		return nil, fmt.Errorf("sync %s: %w", providerID, err)
	}
	owners, err := f.store.BiomeOwners(ctx)
	if err != nil {
		return nil, fmt.Errorf("sync %s: %w", providerID, err)
	}
	lctx := ctx
	auth, oauth, err := oauthOf(old)
	if err != nil {
		return nil, err
	}
	if oauth {
		if lctx, _, err = f.token(ctx, owners[providerID], old, syncOwner(old, auth, by)); err != nil {
			return nil, err
		}
	}
	listed, err := f.dialer.listTools(lctx, old)
	if err != nil {
		return nil, err
	}
	tools, err := translate(providerID, listed)
	if err != nil {
		return nil, err
	}
	if oauth && auth.Owner == store.OwnerUser {
		// Each call goes through the calling person's own account: an agent acting for a
		// person may make it (policies/delegation.rego), as that person.
		delegable := true
		for i := range tools {
			tools[i].Contribution.Manifest.Delegable = &delegable
		}
	}
	caps, err := f.store.ListCapabilities(ctx)
	if err != nil {
		return nil, fmt.Errorf("sync %s: %w", providerID, err)
	}
	byRef := map[string]store.Capability{}
	for _, c := range caps {
		byRef[c.Ref] = c
	}
	next := old
	next.Generation, next.SyncedAt, next.Org = old.Generation+1, time.Now().UTC(), owners[providerID]
	return f.save(ctx, next, &old, tools, byRef, by)
}

// save stores a new generation of srv with tools. prev is the stored generation (nil at
// registration); caps holds the current catalog by ref.
func (f *Federation) save(ctx context.Context, srv store.MCPServer, prev *store.MCPServer, tools []tool,
	caps map[string]store.Capability, by string) (*SyncResult, error) {
	res := &SyncResult{Added: []string{}, Redefined: []string{}, Removed: []string{}}
	pinned := map[string]store.MCPTool{}
	if prev != nil {
		for _, t := range prev.Tools {
			pinned[t.Ref] = t
		}
	}
	now := time.Now().UTC()
	var events []store.LifecycleEvent
	move := func(ref, to string) {
		if c, ok := caps[ref]; ok && c.Lifecycle != to {
			events = append(events, store.LifecycleEvent{Ref: ref, From: c.Lifecycle, To: to, Actor: by, At: now})
		}
	}
	current := map[string]bool{}
	srv.Tools = srv.Tools[:0:0]
	for _, t := range tools {
		current[t.Ref] = true
		srv.Tools = append(srv.Tools, store.MCPTool{Ref: t.Ref, Name: t.Name, Pin: t.Pin})
		old, ok := pinned[t.Ref]
		switch {
		case !ok:
			res.Added = append(res.Added, t.Ref)
			if c, ok := caps[t.Ref]; ok && c.BiomeID == srv.ProviderID {
				move(t.Ref, store.LifecycleSeeded) // a retired tool that came back
			}
		case old.Pin != t.Pin || old.Name != t.Name:
			res.Redefined = append(res.Redefined, t.Ref)
			move(t.Ref, store.LifecycleSeeded)
		}
	}
	for ref := range pinned {
		if !current[ref] {
			res.Removed = append(res.Removed, ref)
			move(ref, store.LifecycleRetired)
		}
	}
	sort.Strings(res.Removed)
	res.Changed = prev == nil || len(res.Added)+len(res.Redefined)+len(res.Removed) > 0
	if !res.Changed {
		res.Server = f.view(*prev, caps)
		return res, nil
	}

	b, bv, err := biomeOf(srv, tools, prev)
	if err != nil {
		return nil, err
	}
	var prevBiome *manifest.Biome
	if prev != nil {
		if prevBiome, err = f.storedBiome(ctx, *prev); err != nil {
			return nil, err
		}
	}
	digest := grant.ComputeDigest(b, prevBiome, nil)
	if bv.Digest, err = json.Marshal(digest); err != nil {
		return nil, fmt.Errorf("encode digest: %w", err)
	}
	bv.DigestHash, bv.Owner = digest.Hash, srv.Org
	newCaps := make([]store.Capability, 0, len(tools))
	for _, t := range tools {
		m, err := json.Marshal(t.Contribution.Manifest)
		if err != nil {
			return nil, fmt.Errorf("encode manifest %s: %w", t.Ref, err)
		}
		newCaps = append(newCaps, store.Capability{Ref: t.Ref, BiomeID: srv.ProviderID, BiomeVersion: bv.Version,
			Manifest: m, RunnerKind: RunnerKind, Lifecycle: store.LifecycleSeeded, UpdatedAt: now})
	}
	if err := f.store.SaveMCPServer(ctx, srv, bv, newCaps, events); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return nil, fault.New(fault.Conflict, CodeSyncConflict,
				"%s changed concurrently, or one of its refs belongs to another biome; nothing was stored", srv.ProviderID)
		}
		return nil, fmt.Errorf("save %s: %w", srv.ProviderID, err)
	}
	f.remember(srv)
	if err := f.changed(ctx); err != nil {
		return nil, err
	}
	after, err := f.store.ListCapabilities(ctx)
	if err != nil {
		return nil, fmt.Errorf("save %s: %w", srv.ProviderID, err)
	}
	byRef := map[string]store.Capability{}
	for _, c := range after {
		byRef[c.Ref] = c
	}
	res.Server, res.Digest = f.view(srv, byRef), &digest
	return res, nil
}

// biomeOf is the biome a generation of srv publishes its tools under.
func biomeOf(srv store.MCPServer, tools []tool, prev *store.MCPServer) (*manifest.Biome, store.BiomeVersion, error) {
	b := &manifest.Biome{ID: srv.ProviderID, Version: version(srv.Generation), DefaultProfile: DefaultProfile,
		RequiresCapabilities: []string{}, PermissionHints: []manifest.PermissionHint{}}
	for _, t := range tools {
		b.RequiresCapabilities = append(b.RequiresCapabilities, t.Ref)
		b.PermissionHints = append(b.PermissionHints, manifest.PermissionHint{Capability: t.Ref,
			Reason: fmt.Sprintf("MCP tool %q of %s, definition %s", t.Name, srv.ProviderID, t.Pin)})
		b.Contributions = append(b.Contributions, t.Contribution)
	}
	mraw, err := json.Marshal(b)
	if err != nil {
		return nil, store.BiomeVersion{}, fmt.Errorf("encode biome %s: %w", b.ID, err)
	}
	contribs := b.Contributions
	if contribs == nil {
		contribs = []manifest.Contribution{}
	}
	craw, err := json.Marshal(contribs)
	if err != nil {
		return nil, store.BiomeVersion{}, fmt.Errorf("encode contributions of %s: %w", b.ID, err)
	}
	h := sha256.New()
	h.Write(mraw)
	h.Write([]byte{0})
	h.Write(craw)
	return b, store.BiomeVersion{ID: b.ID, Version: b.Version, Manifest: mraw, Contributions: craw,
		ContentHash: "sha256:" + hex.EncodeToString(h.Sum(nil)), CreatedAt: time.Now().UTC()}, nil
}

func version(gen int64) string { return fmt.Sprintf("1.0.%d", gen) }

// storedBiome reads back the biome of a stored generation, for the digest's diff.
func (f *Federation) storedBiome(ctx context.Context, srv store.MCPServer) (*manifest.Biome, error) {
	bv, err := f.store.GetBiomeVersion(ctx, srv.ProviderID, version(srv.Generation))
	if err != nil {
		return nil, fmt.Errorf("previous tools of %s: %w", srv.ProviderID, err)
	}
	var b manifest.Biome
	if err := json.Unmarshal(bv.Manifest, &b); err != nil {
		return nil, fmt.Errorf("previous tools of %s: %w", srv.ProviderID, err)
	}
	if err := json.Unmarshal(bv.Contributions, &b.Contributions); err != nil {
		return nil, fmt.Errorf("previous tools of %s: %w", srv.ProviderID, err)
	}
	return &b, nil
}

// List answers the servers registered by org.
func (f *Federation) List(ctx context.Context, org string) (map[string]any, error) {
	servers, err := f.store.ListMCPServers(ctx)
	if err != nil {
		return nil, fmt.Errorf("list mcp servers: %w", err)
	}
	owners, err := f.store.BiomeOwners(ctx)
	if err != nil {
		return nil, fmt.Errorf("list mcp servers: %w", err)
	}
	caps, err := f.store.ListCapabilities(ctx)
	if err != nil {
		return nil, fmt.Errorf("list mcp servers: %w", err)
	}
	byRef := map[string]store.Capability{}
	for _, c := range caps {
		byRef[c.Ref] = c
	}
	out := make([]ServerView, 0, len(servers))
	for _, s := range servers {
		if owner, ok := owners[s.ProviderID]; ok && owner == org {
			out = append(out, f.view(s, byRef))
		}
	}
	return map[string]any{"servers": out}, nil
}

func (f *Federation) view(s store.MCPServer, caps map[string]store.Capability) ServerView {
	_, declared := f.stdio[s.ProviderID]
	v := ServerView{ProviderID: s.ProviderID, Transport: s.Transport, URL: s.URL, Declared: s.Transport == TransportStdio && declared,
		Auth: s.Auth, TimeoutMs: s.TimeoutMs, Version: version(s.Generation), Tools: []ToolView{}, RegisteredBy: s.RegisteredBy,
		RegisteredAt: s.RegisteredAt.Format(time.RFC3339), SyncedAt: s.SyncedAt.Format(time.RFC3339)}
	for _, t := range s.Tools {
		v.Tools = append(v.Tools, ToolView{Ref: t.Ref, Name: t.Name, Pin: t.Pin, Lifecycle: caps[t.Ref].Lifecycle})
	}
	return v
}

// known is a server record as this replica last read it, its OAuth document decoded once
// (not at every call).
type known struct {
	srv   store.MCPServer
	auth  connection.Server // what discovery found, for auth oauth
	oauth bool              // auth oauth
	err   error             // the OAuth document did not decode
}

func (f *Federation) remember(srv store.MCPServer) known {
	k := known{srv: srv}
	k.auth, k.oauth, k.err = oauthOf(srv)
	f.cacheMu.Lock()
	defer f.cacheMu.Unlock()
	f.cache[srv.ProviderID] = k
	return k
}

// Resolve implements gateway.Resolver for capabilities of runner kind mcp-external: the
// server is the one registered under the entry's biome id, at the generation the entry was
// published with (re-read from the store when this replica's copy is older).
func (f *Federation) Resolve(ctx context.Context, ec identity.ExecContext, entry *catalog.Entry) (runner.Runner, bool, error) {
	c := entry.Capability
	if c.RunnerKind != RunnerKind {
		return nil, false, nil
	}
	k, err := f.serverOf(ctx, c.BiomeID, c.BiomeVersion)
	if err != nil {
		return nil, false, err
	}
	srv := k.srv
	for _, t := range srv.Tools {
		if t.Ref == c.Ref {
			r := toolRunner{pool: f.pool, srv: srv, name: t.Name}
			if k.err != nil {
				return nil, false, fault.Wrap(k.err, fault.Provider, CodeUnknownServer, "%s: its MCP server %q cannot be read", c.Ref, c.BiomeID)
			}
			if k.oauth {
				owner, _ := connection.OwnerFor(ec, k.auth.Owner)
				r.token = func(ctx context.Context) (context.Context, string, error) { return f.token(ctx, ec.Org, srv, owner) }
			}
			return r, true, nil
		}
	}
	return nil, false, fault.New(fault.Provider, CodeUnknownServer, "%s is not a tool of MCP server %q at version %s", c.Ref, c.BiomeID, version(srv.Generation))
}

// serverOf is the server registered under provider at the generation of version: this
// replica's copy, re-read from the store when older.
func (f *Federation) serverOf(ctx context.Context, provider, version string) (known, error) {
	f.cacheMu.Lock()
	k, ok := f.cache[provider]
	f.cacheMu.Unlock()
	if ok && versionOf(k.srv) == version {
		return k, nil
	}
	srv, err := f.store.GetMCPServer(ctx, provider)
	if err != nil {
		slog.Error("mcp server unreadable", "provider", provider, "err", err)
		return known{}, fault.New(fault.Provider, CodeUnknownServer, "its MCP server %q cannot be read", provider)
	}
	return f.remember(srv), nil
}

func versionOf(srv store.MCPServer) string { return version(srv.Generation) }
