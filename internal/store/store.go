// Package store holds the system of record of the gateway: biome versions, the capability
// catalog, install grants and the append-only audit log. One interface, two engines
// (sqlite for the embedded default, postgres for production), one conformance suite
// (package storetest) that both must pass.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Typed errors every engine returns (wrapped) so callers can map them to HTTP answers.
var (
	// ErrNotFound: the record does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the write contradicts a stored record (same biome version with other
	// content, a lifecycle transition from a state the record is not in, a duplicate id).
	ErrConflict = errors.New("conflict")
	// ErrUnavailable: the engine cannot be reached; callers fail closed.
	ErrUnavailable = errors.New("store unavailable")
	// ErrOwned: the biome id belongs to another org (or to the operator's own store).
	ErrOwned = errors.New("owned by another org")
	// ErrInvalid: the record breaks a rule of the store itself (an empty key, an unknown
	// lifecycle state, a document that is not JSON); the message names the field.
	ErrInvalid = errors.New("invalid")
)

// Lifecycle states of a capability ref (spec: "Capability lifecycle").
const (
	LifecycleProposed   = "proposed"
	LifecycleSeeded     = "seeded"
	LifecyclePublished  = "published"
	LifecycleDeprecated = "deprecated"
	LifecycleRetired    = "retired"
)

// BiomeVersion is one submitted version of a biome: its biome.json, its contributions and
// the permission digest computed at submission.
type BiomeVersion struct {
	ID            string
	Version       string
	Manifest      json.RawMessage // biome.json as submitted
	Contributions json.RawMessage // JSON array of contribution objects
	ContentHash   string          // hash of manifest+contributions; same version, other hash = ErrConflict
	DigestHash    string
	Digest        json.RawMessage
	CreatedAt     time.Time
	// Owner is the org submitting the version; "" is the operator's own store. The first
	// version of an id claims it for its owner; a later one of another owner is ErrOwned.
	Owner string
}

// Capability is one catalog entry, keyed by its ref.
type Capability struct {
	Ref          string
	BiomeID      string
	BiomeVersion string
	Manifest     json.RawMessage // the contribution manifest, provenance not included
	Invocation   json.RawMessage // nil when not declared
	RunnerKind   string          // kernel | http | connector | mcp-external
	Lifecycle    string
	ReplacedBy   string
	UpdatedAt    time.Time
}

// LifecycleEvent records one explicit lifecycle transition.
type LifecycleEvent struct {
	Ref        string
	From       string
	To         string
	ReplacedBy string
	Actor      string
	At         time.Time
}

// Grant is a recorded BiomeInstallGrant: an org admin's approval of one digest.
type Grant struct {
	ID           string
	Org          string // the org whose callers the grant covers
	BiomeID      string
	BiomeVersion string
	DigestHash   string
	Profile      string
	Customize    json.RawMessage // per-ref customization object, may be nil
	ApprovedBy   string
	ApprovedAt   time.Time
	// Supersedes is the grant this one changed ("" for a first grant): the newest grant of an
	// (org, biome) is its effective one, so recording this one retired that one.
	Supersedes string
	// RevokedBy and RevokedAt say who revoked the grant and when; zero while it is not revoked.
	RevokedBy string
	RevokedAt time.Time
}

// Revoked reports whether the grant was revoked.
func (g Grant) Revoked() bool { return !g.RevokedAt.IsZero() }

// AuditRecord is one decision of the funnel. Never the raw input: only its hash.
type AuditRecord struct {
	ID             string
	Org            string // the caller's org; "" when the request named none (unauthenticated)
	Time           time.Time
	Ref            string
	SubjectKind    string
	SubjectRef     string
	Environment    string
	Decision       string          // allowed | denied | pending-approval | error
	Reasons        json.RawMessage // [{code, detail}]
	Suggestions    json.RawMessage
	Obligations    json.RawMessage
	BundleRevision string
	InputHash      string
	Runner         string
	Outcome        string // ok | provider-error | timeout | not-run | ...
	LatencyMicros  int64
	ParentID       string // links follow-up records (approval, run) to the original call
	// Detail is what a record needs beyond its columns: the verified context of a call refused
	// before the policy decided (decision records keep it in PolicyInput), an aggregate's counts.
	Detail json.RawMessage
	// PolicyInput is the input the policy decided on (decision records only; nil on others
	// and on records written before replay existed).
	PolicyInput json.RawMessage
	// Chain links the record to the previous one of its chain; zero when unchained.
	Chain ChainLink
}

// ChainLink places an audit record in its hash chain: Seq counts from 1 within ChainID and
// Hash covers the record and the previous link's hash.
type ChainLink struct {
	ChainID string
	Seq     int64
	Hash    string
	// HeadMAC, set on the last link of each chain in a batch, authenticates the head the
	// store checkpoints with the batch (ChainHead.MAC); it is not a column of the record.
	HeadMAC string
}

// ChainHead is the checkpointed last link of one chain, and the chain's prune checkpoint:
// the last link pruned (Base*; zero when none was), authenticated by BaseMAC under the
// chain's key, so records may be removed up to it and never beyond it unnoticed.
type ChainHead struct {
	ChainID   string
	Seq       int64
	Hash      string
	UpdatedAt time.Time
	BaseSeq   int64
	BaseHash  string
	BaseMAC   string
	// MAC authenticates Seq and Hash under the chain's key; "" for a head written before
	// heads were authenticated.
	MAC string
}

// ChainRegistration registers one chain when its process starts: No counts registrations
// from 1, Anchor is the previous registration's MAC ("" for the first), Legacy the number of
// unchained records the log held at the first registration (0 after it), MAC an HMAC of all
// of them under the chain's key. A chain deleted whole leaves its registration behind.
type ChainRegistration struct {
	No           int64
	ChainID      string
	RegisteredAt time.Time
	Legacy       int64
	Anchor       string
	MAC          string
}

// PruneBoundary is the last prune: records older than Before were removed (chained ones up
// to their chain's checkpoint). Zero when the log was never pruned.
type PruneBoundary struct {
	Before   time.Time
	PrunedAt time.Time
}

// DeploymentKeyEntry is one stored per-deployment secret, as stored (wrapped by the master
// key, or raw when written before wrapping existed).
type DeploymentKeyEntry struct {
	Name      string
	Secret    []byte
	CreatedAt time.Time
}

// AuditFilter selects audit records for replay and verification.
type AuditFilter struct {
	Since, Until time.Time // zero: unbounded
	Org          string    // "" is every org
	// Replayable keeps only decision records carrying a PolicyInput.
	Replayable bool
	// ChainID keeps one chain's records, ordered by Seq (otherwise by time, id).
	ChainID string
	// Unchained keeps only records of no chain.
	Unchained bool
}

// MaxAuditPage bounds one ListAudit answer.
const MaxAuditPage = 1000

// AuditQuery selects audit records of one org for search (GET /v1/audit). Empty fields
// match everything.
type AuditQuery struct {
	Org        string // required: records of other orgs never match ("" is the records of no org)
	SubjectRef string // exact subject ref ("user:alice")
	Ref        string // exact capability ref (or route, for records of no org)
	Decision   string
	ParentID   string // records linked to this one (outcome, approval steps, the run)
	ReasonCode string // one of the record's reasons has this code
	Omit       *AuditOmit
	Since      time.Time // inclusive; zero is unbounded
	Until      time.Time // exclusive; zero is unbounded
	// Before, when set, keeps only records older than it in the (time, id) order: the keyset
	// of the next page is the last record of the previous one.
	Before *AuditPosition
	Limit  int
}

// AuditOmit leaves out of a search the allowed records (decision and outcome) of Refs made by
// subjects of SubjectKind: a person's page loads through the console (reads), which are
// audited but drown what agents do.
type AuditOmit struct {
	SubjectKind string
	Refs        []string
}

// AuditStatsGrains are the bucket widths AuditStats answers (the overview's 1 h by minute,
// 24 h by quarter hour, 7 d by hour), each with how far back from the last
// AdvanceAuditRollups's now its rollups are kept: a range reaching further back is answered
// from what is kept.
var AuditStatsGrains = map[time.Duration]time.Duration{
	time.Minute:      3 * time.Hour,
	15 * time.Minute: 49 * time.Hour,
	time.Hour:        8 * 24 * time.Hour,
}

// AuditStatsTail bounds the records AuditStats reads past the rollups' watermarks (those
// the background pass has not folded yet); the rest are answered as Uncounted.
const AuditStatsTail = 20000

// AuditStatsQuery selects one org's records in [Since, Until) for AuditStats.
type AuditStatsQuery struct {
	Org          string
	Since, Until time.Time
	// Bucket is the width of the series' buckets, one of AuditStatsGrains; Since and Until
	// are multiples of it (Unix time).
	Bucket time.Duration
	// Top bounds the refs and reason codes answered, the most frequent first.
	Top int
	// Calls are the decisions of a call's own record; records of other decisions (approval
	// steps, aggregates) are not calls.
	Calls []string
	// Omit leaves records out of every count, as it does out of ListAudit.
	Omit *AuditOmit
}

// AuditStats are the counts of one org's records in a time range, each one the size of a
// search of the same range (ListAudit): a call is a record of one of the query's Calls
// decisions whose runner is empty (an outcome record repeats its call's decision with the
// runner that ran it). Records beneath a prune checkpoint, still being deleted, are not
// counted.
type AuditStats struct {
	// Series counts calls by time bucket (0 is the one starting at Since) and decision.
	Series []BucketCount
	// Refs counts calls by ref, Reasons denied records by reason code (a record counted
	// once per code it names): the Top largest, ties in key order.
	Refs, Reasons []KeyCount
	// Runners sums the outcome records of the calls that ran, by runner.
	Runners []RunnerCount
	// Revisions are the policy revisions the range's records were decided under, with the
	// first and last record of each.
	Revisions []RevisionSpan
	// Uncounted is how many of the org's records in the range were appended past the
	// rollups' watermarks beyond the AuditStatsTail this answer read: they are not in it.
	Uncounted int64
}

// RollupProgress is what one AdvanceAuditRollups did.
type RollupProgress struct {
	Folded    int64 // records read past the watermarks
	Recounted int   // stale buckets counted again
	Left      int64 // records past the watermarks still (of any org)
}

// BucketCount is the number of calls with one decision in one time bucket.
type BucketCount struct {
	Bucket   int64
	Decision string
	Count    int64
}

// KeyCount is a count of records with one key (a ref, a reason code).
type KeyCount struct {
	Key   string
	Count int64
}

// RunnerCount sums one runner's outcome records: Errors have an outcome other than ok.
type RunnerCount struct {
	Runner                             string
	Runs, Errors                       int64
	LatencySumMicros, LatencyMaxMicros int64
}

// RevisionSpan is when a policy revision decided the records of a range.
type RevisionSpan struct {
	Revision    string
	First, Last time.Time
}

// AuditPosition is a place in the newest-first order of the audit log.
type AuditPosition struct {
	Time time.Time
	ID   string
}

// RevisionSubscriber is a store that announces revision bumps made by other writers
// (PostgreSQL's LISTEN/NOTIFY). SubscribeRevisions calls onConnect once listening (so the
// caller catches up on what it missed), then onRevision with each bumped revision (-1 when
// unreadable), until ctx ends or the connection is lost; it returns why.
type RevisionSubscriber interface {
	SubscribeRevisions(ctx context.Context, onConnect func(), onRevision func(rev int64)) error
}

// AuditPartitioner is a store whose audit log is partitioned by time (PostgreSQL: one
// partition per UTC day, and a default one for rows no day partition covers, so an append
// never fails for want of one). EnsureAuditPartitions creates the partitions of the days
// from `from` to `to` (both included) that do not exist yet, and returns how many it
// created; the gateway's maintenance keeps the next days' created ahead of time.
type AuditPartitioner interface {
	EnsureAuditPartitions(ctx context.Context, from, to time.Time) (int, error)
}

// AuditPartitionsAhead is how many days of audit partitions, today's included, an
// AuditPartitioner's store keeps created ahead of time (at open, and hourly while serving).
const AuditPartitionsAhead = 7

// CatalogStore keeps the biomes, their capabilities and the capabilities' lifecycle.
type CatalogStore interface {
	// PublishBiome stores a biome version and upserts its capabilities in one transaction:
	// either everything lands or nothing does. Re-submitting identical content is a no-op;
	// the same id+version with another ContentHash is ErrConflict. A capability with empty
	// BiomeID/BiomeVersion takes the biome version's; other values are ErrInvalid. A ref twice
	// in one call, or a ref owned by another biome, is ErrConflict.
	PublishBiome(ctx context.Context, bv BiomeVersion, caps []Capability) error
	GetBiomeVersion(ctx context.Context, id, version string) (BiomeVersion, error)
	// BiomeOwners maps every biome id to the org owning it ("" for the operator's store).
	BiomeOwners(ctx context.Context) (map[string]string, error)
	// ListBiomeVersions returns the versions of one biome, oldest first.
	ListBiomeVersions(ctx context.Context, id string) ([]BiomeVersion, error)

	// UpsertCapability inserts c, or updates the stored entry of the same ref and biome
	// (ErrConflict when another biome owns the ref). An update keeps the stored Lifecycle and
	// ReplacedBy: the lifecycle moves only through TransitionLifecycle. Same for PublishBiome.
	UpsertCapability(ctx context.Context, c Capability) error
	GetCapability(ctx context.Context, ref string) (Capability, error)
	// ListCapabilities returns the catalog ordered by ref.
	ListCapabilities(ctx context.Context) ([]Capability, error)
	// TransitionLifecycle moves ref from state `from` to `to` and records the event.
	// ErrConflict when the stored state is not `from`; ErrNotFound when ref is unknown.
	TransitionLifecycle(ctx context.Context, ev LifecycleEvent) error
	// ListLifecycleEvents returns the transitions of ref, oldest first.
	ListLifecycleEvents(ctx context.Context, ref string) ([]LifecycleEvent, error)
}

// GrantStore keeps the grants, and the revision of everything the policy is compiled from.
type GrantStore interface {
	// PutGrant records a grant once: a stored ID is ErrConflict, an unknown biome version
	// ErrNotFound.
	PutGrant(ctx context.Context, g Grant) error
	// ListGrants returns every grant, oldest approval first.
	ListGrants(ctx context.Context) ([]Grant, error)
	// RevokeGrant stamps grant id of org revoked by `by` at `at` and answers it: ErrNotFound
	// when org has no such grant (another org's is unknown), ErrConflict when it is already
	// revoked. It bumps the policy revision like every grant write.
	RevokeGrant(ctx context.Context, org, id, by string, at time.Time) (Grant, error)

	// Revision increases with every change to data the policy is compiled from
	// (capabilities, lifecycle, grants), so replicas can tell when to rebuild.
	Revision(ctx context.Context) (int64, error)
}

// AuditLogStore appends and reads the audit log.
type AuditLogStore interface {
	// AppendAudit writes durably; there is no update or delete (the schema refuses both).
	// A stored ID is ErrConflict.
	AppendAudit(ctx context.Context, r AuditRecord) error
	// AppendAudits writes rs durably in one transaction, all or none (group commit).
	AppendAudits(ctx context.Context, rs []AuditRecord) error
	// AppendAuditsWithUsage is AppendAudits that also saves usage, as SaveUsage does, in
	// the same transaction: one commit makes the records and the counts durable together.
	AppendAuditsWithUsage(ctx context.Context, rs []AuditRecord, usage []UsageCount) error
	GetAudit(ctx context.Context, id string) (AuditRecord, error)
	// ListAudit returns the records of one org matching q, newest first (time, then id,
	// descending), at most q.Limit of them (MaxAuditPage when 0 or larger).
	ListAudit(ctx context.Context, q AuditQuery) ([]AuditRecord, error)
	// ScanAudit calls fn for every record f selects, in order, reading in pages so a large
	// log is never held in memory; fn's error stops the scan and is returned.
	ScanAudit(ctx context.Context, f AuditFilter, fn func(AuditRecord) error) error
}

// AuditStatsStore counts the overview's figures: the audit rollups and the approvals waiting.
type AuditStatsStore interface {
	// AuditStats counts one org's records of a time range (the overview's figures) from the
	// rollups, the records past their watermarks (at most AuditStatsTail) and the range's
	// unchained records: its cost grows with the range's buckets and distinct refs, never
	// with the number of records.
	AuditStats(ctx context.Context, q AuditStatsQuery) (AuditStats, error)
	// AdvanceAuditRollups folds at most limit records past the rollups' watermarks into
	// them, counts again the buckets a prune removed records of, and drops the buckets older
	// than their grain keeps (AuditStatsGrains) from now. Replicas take turns.
	AdvanceAuditRollups(ctx context.Context, now time.Time, limit int) (RollupProgress, error)
	// ApprovalsWaiting counts org's pending approvals not expired at now, and the oldest's
	// creation time (zero when none).
	ApprovalsWaiting(ctx context.Context, org string, now time.Time) (int64, time.Time, error)
}

// AuditChainStore keeps the audit chains' heads and registrations (their integrity).
type AuditChainStore interface {
	// ChainHeads returns every chain's checkpointed head. AppendAudits checkpoints the last
	// link of each chain of its batch in the batch's transaction.
	ChainHeads(ctx context.Context) ([]ChainHead, error)
	// RegisterChain stores reg and its chain's empty head (seq 0, head.MAC authenticating it)
	// in one transaction; ErrConflict when reg.No or reg.ChainID is taken.
	RegisterChain(ctx context.Context, reg ChainRegistration, head ChainHead) error
	// ChainRegistrations returns every registration, by No.
	ChainRegistrations(ctx context.Context) ([]ChainRegistration, error)
}

// AuditPruneStore checkpoints and carries out the audit log's retention.
type AuditPruneStore interface {
	// LastLinksBefore returns, for every chain holding records older than before, the link
	// of the highest Seq among them (the prune's boundary in that chain).
	LastLinksBefore(ctx context.Context, before time.Time) ([]ChainLink, error)
	// CheckpointPrune records, in one transaction, the boundary and each chain's new base
	// (ChainHead's Base* fields of bases, by ChainID): the records a prune may then delete.
	// A base never moves back (ErrConflict), nor onto a chain with no head (ErrNotFound);
	// the boundary never moves back either.
	CheckpointPrune(ctx context.Context, b PruneBoundary, bases []ChainHead) error
	// PruneBoundary returns the last prune's boundary (zero: never pruned).
	PruneBoundary(ctx context.Context) (PruneBoundary, error)
	// DeletePrunedAudit deletes at most limit records beneath the checkpoints (chained ones
	// at or below their chain's base, unchained ones older than the boundary), each call its
	// own short transaction so appends go on between calls; it returns how many, 0 when none
	// remain. The schema refuses every other delete. An engine whose log is partitioned by
	// time (AuditPartitioner) drops instead a whole partition lying beneath the checkpoints,
	// one a call, and returns its count, which may exceed limit.
	DeletePrunedAudit(ctx context.Context, limit int) (int64, error)
}

// KeyStore keeps the per-deployment secrets, wrapped by the master key.
type KeyStore interface {
	// DeploymentKey returns the per-deployment secret called name, storing candidate first
	// if none is stored (insert-if-absent): replicas starting together all get the one key
	// written first. The secret never leaves the store except through this call.
	DeploymentKey(ctx context.Context, name string, candidate []byte) ([]byte, error)
	// ListDeploymentKeys returns every stored per-deployment secret, by name.
	ListDeploymentKeys(ctx context.Context) ([]DeploymentKeyEntry, error)
	// ReplaceDeploymentKey sets the secret of name from old to next, created when next's key
	// was created (a rewrap keeps the key's own time), and stores each of keep (a retired key
	// under a name of its own), in one transaction: ErrConflict when the stored secret is not
	// old (another writer replaced it) or a kept name is stored, ErrNotFound when name has none.
	ReplaceDeploymentKey(ctx context.Context, name string, old, next []byte, created time.Time, keep ...DeploymentKeyEntry) error
}

// Store is the one storage interface both engines implement: the composition of the
// interfaces of each concern, which consumers take one by one (or narrower ones of their own).
type Store interface {
	CatalogStore
	GrantStore
	AuditLogStore
	AuditStatsStore
	AuditChainStore
	AuditPruneStore
	KeyStore
	FederationStore
	ConnectionStore
	BindingStore
	ObligationStore
	IdempotencyStore
	HealthStore
	Ping(ctx context.Context) error
	Close() error
}
