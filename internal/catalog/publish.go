package catalog

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"golang.org/x/mod/semver"

	"github.com/xemahq/xema/internal/capref"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/grant"
	"github.com/xemahq/xema/internal/inputschema"
	"github.com/xemahq/xema/internal/kernel"
	"github.com/xemahq/xema/internal/manifest"
	"github.com/xemahq/xema/internal/store"
)

// Writer is the store as the Publisher uses it: the writes of biome versions, lifecycles and
// grants, and the reads they are checked against (store.Store).
type Writer interface {
	GetMCPServer(ctx context.Context, providerID string) (store.MCPServer, error)
	PublishBiome(ctx context.Context, bv store.BiomeVersion, caps []store.Capability) error
	GetBiomeVersion(ctx context.Context, id, version string) (store.BiomeVersion, error)
	BiomeOwners(ctx context.Context) (map[string]string, error)
	ListBiomeVersions(ctx context.Context, id string) ([]store.BiomeVersion, error)
	UpsertCapability(ctx context.Context, c store.Capability) error
	GetCapability(ctx context.Context, ref string) (store.Capability, error)
	ListCapabilities(ctx context.Context) ([]store.Capability, error)
	TransitionLifecycle(ctx context.Context, ev store.LifecycleEvent) error
	PutGrant(ctx context.Context, g store.Grant) error
	ListGrants(ctx context.Context) ([]store.Grant, error)
	RevokeGrant(ctx context.Context, org, id, by string, at time.Time) (store.Grant, error)
}

// Publisher submits biome versions and records install grants: the two write paths of
// stage 1. Both end in Changed, which rebuilds the catalog and the policy.
type Publisher struct {
	Store Writer
	// OperatorOrg is the org whose administrators move the lifecycle of the operator's own
	// store's capabilities; "" lets nobody.
	OperatorOrg string
	Kernel      *kernel.Registry
	Envs        grant.Environments
	Profiles    grant.Profiles
	// HasBinding reports an org-level provider binding serving ref (nil: none exist).
	HasBinding func(ref string) bool
	// Changed is called after every successful write.
	Changed func(ctx context.Context) error
	// Revoked, when set, is called once a revoke is written and the policy rebuilt, to end
	// what the revoked grant left waiting (its pending held calls); its error is the revoke's.
	Revoked func(ctx context.Context, g store.Grant) error
	// Impact replays org's calls recorded since with candidate counted as if recorded (a
	// grant's dry run); nil refuses dry runs.
	Impact func(ctx context.Context, candidate store.Grant, since time.Time) (Impact, error)
	// CheckURL judges a declared http invocation's URL (egress.Policy.CheckURL): a non-empty
	// answer is a 400 naming /contributions/N/invocation/url. nil checks nothing.
	CheckURL func(raw string, credential bool) string
}

// Submission is the body of POST /v1/biomes.
type Submission struct {
	Manifest      json.RawMessage   `json:"manifest"`
	Contributions []json.RawMessage `json:"contributions"`
}

// SubmitResult answers a submission.
type SubmitResult struct {
	BiomeID string       `json:"biomeId"`
	Version string       `json:"version"`
	Digest  grant.Digest `json:"digest"`
}

// Submit validates a biome version as a whole (manifest, every contribution, the publish-time
// envelope, the input schemas) and stores it with its digest in one transaction. Nothing is
// stored when anything is wrong.
// The biome id belongs to the org submitting its first version (owner).
func (p *Publisher) Submit(ctx context.Context, sub Submission, owner string) (*SubmitResult, error) {
	b, problems := fromSubmission(sub.Manifest, sub.Contributions)
	if len(problems) > 0 {
		return nil, problemsError("INVALID_MANIFEST", problems)
	}
	return p.publish(ctx, b, sub, owner)
}

// SubmitDir publishes a biome directory of the operator's own store (start-up loading); the
// whole biome or nothing.
func (p *Publisher) SubmitDir(ctx context.Context, b *manifest.Biome) (*SubmitResult, error) {
	sub := Submission{}
	var err error
	if sub.Manifest, err = json.Marshal(b); err != nil {
		return nil, fmt.Errorf("encode biome %s: %w", b.ID, err)
	}
	for _, c := range b.Contributions {
		raw, err := json.Marshal(c)
		if err != nil {
			return nil, fmt.Errorf("encode contribution %s: %w", c.Manifest.Ref, err)
		}
		sub.Contributions = append(sub.Contributions, raw)
	}
	return p.publish(ctx, b, sub, OperatorOwner)
}

// OperatorOwner is the owner of the biomes of the operator's own store (directories loaded at
// start, the kernel): every org may install them, no org may submit under their ids.
const OperatorOwner = ""

func (p *Publisher) publish(ctx context.Context, b *manifest.Biome, sub Submission, owner string) (*SubmitResult, error) {
	switch _, err := p.Store.GetMCPServer(ctx, b.ID); {
	case err == nil:
		return nil, fault.New(fault.Conflict, "BIOME_ID_TAKEN",
			"/manifest/id: %q is a registered MCP server's provider id; its tools change only through a sync", b.ID)
	case !errors.Is(err, store.ErrNotFound):
		return nil, fmt.Errorf("submit %s@%s: %w", b.ID, b.Version, err)
	}
	existing, err := p.Store.ListCapabilities(ctx)
	if err != nil {
		return nil, fmt.Errorf("submit %s@%s: %w", b.ID, b.Version, err)
	}
	owners, err := p.Store.BiomeOwners(ctx)
	if err != nil {
		return nil, fmt.Errorf("submit %s@%s: %w", b.ID, b.Version, err)
	}
	byRef := make(map[string]store.Capability, len(existing))
	for _, c := range existing {
		byRef[c.Ref] = c
	}

	var problems []inputschema.Violation
	caps := make([]store.Capability, 0, len(b.Contributions))
	for i, c := range b.Contributions {
		at := fmt.Sprintf("/contributions/%d", i)
		ref := c.Manifest.Ref
		if ways := p.ways(c); len(ways) != 1 {
			problems = append(problems, inputschema.Violation{Path: at, Message: envelopeMessage(ref, ways)})
		}
		if inv := c.Invocation; inv != nil && inv.Kind == "http" && p.CheckURL != nil {
			// The invocation receives the gateway's bearer token: https, or an allowed loopback.
			if msg := p.CheckURL(inv.URL, true); msg != "" {
				problems = append(problems, inputschema.Violation{Path: at + "/invocation/url", Message: "invocation url " + msg})
			}
		}
		if _, err := inputschema.Compile(ref, c.Manifest.InputSchema); err != nil {
			problems = append(problems, inputschema.Violation{Path: at + "/manifest/inputSchema", Message: err.Error()})
		}
		if _, err := inputschema.CompileOutput(ref, c.Manifest.OutputSchema); err != nil {
			problems = append(problems, inputschema.Violation{Path: at + "/manifest/outputSchema", Message: err.Error()})
		}
		if old, ok := byRef[ref]; ok && old.BiomeID != b.ID {
			// Refs are one namespace, so the ref is refused whoever provides it; another org's
			// biome is not named (its id is that org's business).
			by := "another biome"
			if o, owned := owners[old.BiomeID]; !owned || o == OperatorOwner || o == owner {
				by = "biome " + old.BiomeID
			}
			problems = append(problems, inputschema.Violation{Path: at + "/manifest/ref",
				Message: fmt.Sprintf("%s is already provided by %s", ref, by)})
		}
		if old := byRef[ref]; old.BiomeID == b.ID && visibleLifecycles[old.Lifecycle] {
			continue // already published: this version takes effect only when granted (Install)
		}
		capa, err := p.capability(b, c, byRef[ref])
		if err != nil {
			return nil, err
		}
		caps = append(caps, capa)
	}
	if len(problems) > 0 {
		return nil, &fault.Error{Kind: fault.Invalid, Code: "INVALID_MANIFEST",
			Message: fmt.Sprintf("biome %s@%s cannot be published (%d problem(s))", b.ID, b.Version, len(problems)), Violations: problems}
	}

	prev, err := p.previous(ctx, b)
	if err != nil {
		return nil, err
	}
	lookup, err := grant.CatalogLookup(existing)
	if err != nil {
		return nil, err
	}
	digest := grant.ComputeDigest(b, prev, lookup)
	digestRaw, err := json.Marshal(digest)
	if err != nil {
		return nil, fmt.Errorf("encode digest: %w", err)
	}
	contribs, err := json.Marshal(sub.Contributions)
	if err != nil {
		return nil, fmt.Errorf("encode contributions: %w", err)
	}
	canonical, err := json.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("encode biome: %w", err)
	}
	canonicalContribs, err := json.Marshal(b.Contributions)
	if err != nil {
		return nil, fmt.Errorf("encode contributions: %w", err)
	}
	bv := store.BiomeVersion{
		ID: b.ID, Version: b.Version, Manifest: sub.Manifest, Contributions: contribs,
		ContentHash: contentHash(canonical, canonicalContribs), DigestHash: digest.Hash, Digest: digestRaw, CreatedAt: time.Now().UTC(),
		Owner: owner,
	}
	if err := p.Store.PublishBiome(ctx, bv, caps); err != nil {
		if errors.Is(err, store.ErrOwned) {
			return nil, fault.New(fault.Conflict, "BIOME_ID_TAKEN",
				"/manifest/id: biome id %q belongs to another org; choose another id", b.ID)
		}
		if errors.Is(err, store.ErrConflict) {
			return nil, fault.New(fault.Conflict, "BIOME_VERSION_CONFLICT",
				"biome %s@%s was already submitted with different content; bump /manifest/version", b.ID, b.Version)
		}
		return nil, fmt.Errorf("submit %s@%s: %w", b.ID, b.Version, err)
	}
	if err := p.Changed(ctx); err != nil {
		return nil, err
	}
	return &SubmitResult{BiomeID: b.ID, Version: b.Version, Digest: digest}, nil
}

// ways lists how a contribution can be reached: exactly one is required at publish.
func (p *Publisher) ways(c manifest.Contribution) []string {
	var ways []string
	if c.Invocation != nil {
		ways = append(ways, "a declared invocation ("+c.Invocation.Kind+")")
	}
	if p.HasBinding != nil && p.HasBinding(c.Manifest.Ref) {
		ways = append(ways, "an org-level provider binding")
	}
	if _, ok := p.Kernel.Handler(c.Manifest.Ref); ok {
		ways = append(ways, "a live runner")
	}
	return ways
}

func envelopeMessage(ref string, ways []string) string {
	if len(ways) == 0 {
		return fmt.Sprintf("%s has no way to run: declare an invocation, bind a provider, or register a live runner", ref)
	}
	return fmt.Sprintf("%s is reachable in %d ways (%s); exactly one is allowed", ref, len(ways), strings.Join(ways, ", "))
}

// capability builds the catalog entry for a contribution, keeping the lifecycle of an entry
// the same biome already had.
func (p *Publisher) capability(b *manifest.Biome, c manifest.Contribution, old store.Capability) (store.Capability, error) {
	capa, err := capabilityOf(b, c)
	if err != nil {
		return store.Capability{}, err
	}
	if old.Ref != "" && old.BiomeID == b.ID {
		capa.Lifecycle, capa.ReplacedBy = old.Lifecycle, old.ReplacedBy
	}
	return capa, nil
}

// capabilityOf is the seeded catalog entry of contribution c of biome version b.
func capabilityOf(b *manifest.Biome, c manifest.Contribution) (store.Capability, error) {
	m, err := json.Marshal(c.Manifest)
	if err != nil {
		return store.Capability{}, fmt.Errorf("encode manifest %s: %w", c.Manifest.Ref, err)
	}
	capa := store.Capability{Ref: c.Manifest.Ref, BiomeID: b.ID, BiomeVersion: b.Version, Manifest: m,
		RunnerKind: "kernel", Lifecycle: store.LifecycleSeeded, UpdatedAt: time.Now().UTC()}
	if c.Invocation != nil {
		if capa.Invocation, err = json.Marshal(c.Invocation); err != nil {
			return store.Capability{}, fmt.Errorf("encode invocation %s: %w", c.Manifest.Ref, err)
		}
		capa.RunnerKind = c.Invocation.Kind
	}
	return capa, nil
}

// previous returns the newest stored version of the biome other than b's own.
func (p *Publisher) previous(ctx context.Context, b *manifest.Biome) (*manifest.Biome, error) {
	versions, err := p.Store.ListBiomeVersions(ctx, b.ID)
	if err != nil {
		return nil, fmt.Errorf("versions of %s: %w", b.ID, err)
	}
	for i := len(versions) - 1; i >= 0; i-- {
		if versions[i].Version == b.Version {
			continue
		}
		prev, problems := fromSubmission(versions[i].Manifest, contributionsOf(versions[i]))
		if len(problems) > 0 {
			return nil, fmt.Errorf("stored biome %s@%s no longer validates: %v", b.ID, versions[i].Version, problems[0])
		}
		return prev, nil
	}
	return nil, nil
}

func contributionsOf(bv store.BiomeVersion) []json.RawMessage {
	var raws []json.RawMessage
	_ = json.Unmarshal(bv.Contributions, &raws)
	return raws
}

// Install records an org admin's approval of a digest and publishes the biome's capabilities:
// seeded refs become published, and a published @N deprecates older majors of the same
// capability with replacedBy.
// The grant is org's: it covers org's callers only. A biome another org owns is answered
// as an unknown one.
func (p *Publisher) Install(ctx context.Context, raw json.RawMessage, org, approvedBy string) (store.Grant, error) {
	g, _, err := p.install(ctx, raw, org, approvedBy, nil)
	return g, err
}

// Impact is what a grant would change over the calls an org recorded since Since.
type Impact struct {
	Considered  int `json:"considered"`
	AllowToDeny int `json:"allowToDeny"`
	DenyToAllow int `json:"denyToAllow"`
	// AllowToHeld counts calls that ran without a person's approval and would now be held
	// for one (a customization's requiresApproval, a profile that holds their risk tier).
	AllowToHeld int    `json:"allowToHeld"`
	Since       string `json:"since"`
	// Truncated is true when the replay stopped at its bound before the window's end.
	Truncated bool `json:"truncated,omitempty"`
	// PrunedBefore is set when Since reaches before the audit retention's boundary: calls
	// recorded before it were pruned and are not counted.
	PrunedBefore string `json:"prunedBefore,omitempty"`
	// Losing are the callers whose recorded calls would now be denied, most calls first, and
	// Recent the newest of those calls: who and what the change takes away.
	Losing []ImpactCaller `json:"losing,omitempty"`
	Recent []ImpactCall   `json:"recent,omitempty"`
}

// ImpactCaller is one caller whose recorded calls a dry run would now deny.
type ImpactCaller struct {
	Subject string `json:"subject"`
	Calls   int    `json:"calls"`
}

// ImpactCall is one recorded call a dry run would now deny.
type ImpactCall struct {
	AuditID     string `json:"auditId"`
	Ref         string `json:"ref"`
	Subject     string `json:"subject"`
	Environment string `json:"environment"`
	Time        string `json:"time"`
}

// DryRun validates a grant exactly as Install does and answers the grant it would record with
// its impact on org's calls recorded since since; it changes nothing.
func (p *Publisher) DryRun(ctx context.Context, raw json.RawMessage, org, approvedBy string, since time.Time) (store.Grant, Impact, error) {
	if p.Impact == nil {
		return store.Grant{}, Impact{}, errDryRunUnavailable()
	}
	return p.install(ctx, raw, org, approvedBy, &since)
}

// install is Install, or its dry run when dryRunSince is set.
func (p *Publisher) install(ctx context.Context, raw json.RawMessage, org, approvedBy string, dryRunSince *time.Time) (store.Grant, Impact, error) {
	g, bv, err := p.validateGrant(ctx, raw, org, approvedBy)
	if err != nil {
		return store.Grant{}, Impact{}, err
	}
	if dryRunSince != nil {
		imp, err := p.Impact(ctx, g, *dryRunSince)
		return g, imp, err
	}
	if err := p.endRevoked(ctx, g.Org, g.BiomeID); err != nil {
		return store.Grant{}, Impact{}, err
	}
	if err := p.Store.PutGrant(ctx, g); err != nil {
		return store.Grant{}, Impact{}, fmt.Errorf("install: %w", err)
	}
	if err := p.adopt(ctx, bv); err != nil {
		return store.Grant{}, Impact{}, err
	}
	if err := p.publishRefs(ctx, bv, approvedBy); err != nil {
		return store.Grant{}, Impact{}, err
	}
	return g, Impact{}, p.Changed(ctx)
}

// endRevoked ends, before org is granted biome again, the calls still held under its revoked
// grant: those its revoke could not withdraw (the store failed) or a replica held before it
// learned of the revoke. None of them runs under the new grant; if they cannot be ended,
// nothing is granted (fail closed).
func (p *Publisher) endRevoked(ctx context.Context, org, biome string) error {
	if p.Revoked == nil {
		return nil
	}
	gs, err := p.Grants(ctx, org, biome)
	if err != nil {
		return fmt.Errorf("install: %w", err)
	}
	last, ok := grant.Newest(gs)[grant.Scope{Org: org, Biome: biome}]
	if !ok || !last.Revoked() {
		return nil
	}
	if err := p.Revoked(ctx, last); err != nil {
		return fmt.Errorf("install: the calls held under revoked grant %s could not all be withdrawn, so nothing was granted: %w", last.ID, err)
	}
	return nil
}

// validateGrant decodes and checks a grant request of org against the biome version it names.
func (p *Publisher) validateGrant(ctx context.Context, raw json.RawMessage, org, approvedBy string) (store.Grant, store.BiomeVersion, error) {
	req, err := grant.DecodeRequest(raw)
	if err != nil {
		return store.Grant{}, store.BiomeVersion{}, grantError(err)
	}
	_, mine, err := p.ownedBy(ctx, req.BiomeID, org)
	if err != nil {
		return store.Grant{}, store.BiomeVersion{}, fmt.Errorf("install: %w", err)
	}
	bv, err := p.Store.GetBiomeVersion(ctx, req.BiomeID, req.Version)
	var bvp *store.BiomeVersion
	switch {
	case err == nil && mine:
		bvp = &bv
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return store.Grant{}, store.BiomeVersion{}, fmt.Errorf("install: %w", err)
	}
	req, err = grant.Validate(req, bvp, p.Envs, p.Profiles)
	if err != nil {
		return store.Grant{}, store.BiomeVersion{}, grantError(err)
	}
	g, err := grant.NewGrant(req, approvedBy, time.Now())
	if err != nil {
		return store.Grant{}, store.BiomeVersion{}, err
	}
	g.Org = org
	return g, bv, nil
}

// ownedBy reports whether org may use biome id (its own, or the operator's store) and who owns
// it. An id nobody owns yet is nobody's.
func (p *Publisher) ownedBy(ctx context.Context, id, org string) (owner string, mine bool, err error) {
	owners, err := p.Store.BiomeOwners(ctx)
	if err != nil {
		return "", false, err
	}
	owner, ok := owners[id]
	return owner, ok && (owner == OperatorOwner || owner == org), nil
}

// adopt makes a granted version the catalog's own for the refs of its biome it holds at an
// older version, so callers without a grant of their own (and new grants) see the newest
// approved version. Lifecycles are kept; orgs whose grants pin another version keep it.
func (p *Publisher) adopt(ctx context.Context, bv store.BiomeVersion) error {
	b, problems := fromSubmission(bv.Manifest, contributionsOf(bv))
	if len(problems) > 0 {
		return fmt.Errorf("adopt %s@%s: stored version no longer validates: %v", bv.ID, bv.Version, problems[0])
	}
	for _, c := range b.Contributions {
		cur, err := p.Store.GetCapability(ctx, c.Manifest.Ref)
		if err != nil {
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			return fmt.Errorf("adopt %s@%s: %w", bv.ID, bv.Version, err)
		}
		if cur.BiomeID != bv.ID || !newerVersion(bv.Version, cur.BiomeVersion) {
			continue
		}
		capa, err := capabilityOf(b, c)
		if err != nil {
			return err
		}
		if err := p.Store.UpsertCapability(ctx, capa); err != nil {
			return fmt.Errorf("adopt %s@%s: %w", bv.ID, bv.Version, err)
		}
	}
	return nil
}

// newerVersion reports whether semantic version a is above b.
func newerVersion(a, b string) bool { return semver.Compare("v"+a, "v"+b) > 0 }

func (p *Publisher) publishRefs(ctx context.Context, bv store.BiomeVersion, actor string) error {
	caps, err := p.Store.ListCapabilities(ctx)
	if err != nil {
		return fmt.Errorf("publish %s: %w", bv.ID, err)
	}
	byRef := map[string]store.Capability{}
	for _, c := range caps {
		byRef[c.Ref] = c
	}
	var refs []string
	for _, c := range caps {
		// Only the version this grant approved: re-approving an old digest must never
		// publish a capability redefined since.
		if c.BiomeID == bv.ID && c.BiomeVersion == bv.Version && c.Lifecycle == store.LifecycleSeeded {
			refs = append(refs, c.Ref)
		}
	}
	sort.Strings(refs)
	for _, ref := range refs {
		if err := p.transition(ctx, ref, store.LifecycleSeeded, store.LifecyclePublished, "", actor); err != nil {
			return err
		}
		r, err := capref.Parse(ref)
		if err != nil {
			continue
		}
		for m := r.Major - 1; m >= 1; m-- {
			r.Major = m
			older := r.String()
			if o, ok := byRef[older]; ok && o.Lifecycle == store.LifecyclePublished {
				if err := p.transition(ctx, older, store.LifecyclePublished, store.LifecycleDeprecated, ref, actor); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (p *Publisher) transition(ctx context.Context, ref, from, to, replacedBy, actor string) error {
	err := p.Store.TransitionLifecycle(ctx, store.LifecycleEvent{Ref: ref, From: from, To: to,
		ReplacedBy: replacedBy, Actor: actor, At: time.Now().UTC()})
	if err != nil && !errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("lifecycle %s %s→%s: %w", ref, from, to, err)
	}
	return nil
}

// grantError turns grant validation errors into a typed client error listing every field.
func grantError(err error) error {
	var fes grant.Errors
	var fe *grant.FieldError
	switch {
	case errors.As(err, &fes):
	case errors.As(err, &fe):
		fes = grant.Errors{fe}
	default:
		return err
	}
	out := &fault.Error{Kind: fes.Kind(), Code: fes[0].Code, Message: fes.Error()}
	for _, f := range fes {
		out.Violations = append(out.Violations, inputschema.Violation{Path: f.Path, Message: f.Message})
	}
	return out
}

// fromSubmission validates a submitted biome like a directory, naming each document by its
// JSON pointer in the request body, so problem paths point into the body.
func fromSubmission(biome json.RawMessage, contributions []json.RawMessage) (*manifest.Biome, []manifest.Problem) {
	files := make([]manifest.File, len(contributions))
	for i, c := range contributions {
		files[i] = manifest.File{Name: fmt.Sprintf("/contributions/%d", i), Data: c}
	}
	return manifest.Check(manifest.File{Name: "/manifest", Data: biome}, files)
}

func problemsError(code string, problems []manifest.Problem) error {
	out := fault.New(fault.Invalid, code, "%d problem(s) in the submission", len(problems))
	for _, pr := range problems {
		out.Violations = append(out.Violations, inputschema.Violation{Path: pr.File + pr.Path, Message: pr.Message})
	}
	return out
}

// contentHash identifies a biome version's content independent of JSON formatting.
func contentHash(parts ...[]byte) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write(p)
		h.Write([]byte{0})
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}
