package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/xemahq/xema/internal/store"
)

// Store is store.Store over one *sql.DB.
type Store struct {
	db *sql.DB
	// counters runs AddUsage: db, or a handle of its own (WithCounters).
	counters *sql.DB
	// countQuery, when set, runs the statement adding a call's counters at once instead of
	// counters (WithCountQuery).
	countQuery CountQuery
	d          Dialect
	// stmts are the statements of the audit batch, prepared once (see prepared).
	stmts sync.Map // query text → *sql.Stmt
}

var _ store.Store = (*Store)(nil)

// New wraps db, whose schema must be migrated (see Migrate). The Store owns db: Close closes it.
func New(db *sql.DB, d Dialect) *Store { return &Store{db: db, counters: db, d: d} }

// WithCounters has AddUsage run on counters, a handle on the same database that the Store
// then owns too (Close closes it). PostgreSQL's counters commit asynchronously on it (see
// postgres.Open).
func (s *Store) WithCounters(counters *sql.DB) *Store {
	s.counters = counters
	return s
}

// CountQuery runs q with args and returns one count a row.
type CountQuery func(ctx context.Context, q string, args []any) ([]int64, error)

// WithCountQuery has AddUsage send the statement adding a call's counters at once
// (addsAtOnce) through query: PostgreSQL sends it on a pgx pool, which costs the gateway
// less CPU a call than database/sql. A refusal, and the adds the statement does not cover,
// still run on counters.
func (s *Store) WithCountQuery(query CountQuery) *Store {
	s.countQuery = query
	return s
}

// fail wraps an engine error of operation op with the store's typed error it stands for.
func (s *Store) fail(op string, err error) error {
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("%s: %w", op, store.ErrNotFound)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %w", op, err)
	case errors.Is(err, sql.ErrConnDone):
		return fmt.Errorf("%s: %w: %w", op, store.ErrUnavailable, err)
	}
	if typed := s.d.Classify(err); typed != nil {
		return fmt.Errorf("%s: %w: %w", op, typed, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// scanner is a *sql.Row or *sql.Rows.
type scanner interface{ Scan(...any) error }

// conn is what both *sql.DB and *sql.Tx offer.
type conn interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// prepared returns the statement of q (already bound), prepared on first use and kept until
// Close: SQLite's driver otherwise parses the text on every Exec, and an audit batch's
// INSERT of 22 placeholders a row cost ~10 % of a call's CPU in parsing alone. Call it
// outside a transaction: SQLite's one connection is the transaction's until it ends. The
// texts are few (one per batch size), so the set stays small.
func (s *Store) prepared(ctx context.Context, q string) (*sql.Stmt, error) {
	if st, ok := s.stmts.Load(q); ok {
		return st.(*sql.Stmt), nil
	}
	st, err := s.db.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	if prev, loaded := s.stmts.LoadOrStore(q, st); loaded {
		_ = st.Close() // another caller prepared it first
		return prev.(*sql.Stmt), nil
	}
	return st, nil
}

// callRow is QueryRowContext, outside a transaction, for a read made on every call of the
// funnel (GetConnection): prepared once (prepared) where the driver parses the query's text
// on every use (Dialect.PrepareBatches), else as is. A statement that fails to prepare is
// run as is, and the query reports the error.
func (s *Store) callRow(ctx context.Context, q string, args ...any) *sql.Row {
	q = s.d.bind(q)
	if s.d.PrepareBatches {
		if st, err := s.prepared(ctx, q); err == nil {
			return st.QueryRowContext(ctx, args...)
		}
	}
	return s.db.QueryRowContext(ctx, q, args...)
}

func (s *Store) exec(ctx context.Context, c conn, q string, args ...any) (int64, error) {
	res, err := c.ExecContext(ctx, s.d.bind(q), args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// inTx runs fn in one transaction; fn returns errors already wrapped for op.
func (s *Store) inTx(ctx context.Context, op string, fn func(tx *sql.Tx) error) error {
	return s.inTxOn(ctx, s.db, op, fn)
}

// inTxOn is inTx on the handle db.
func (s *Store) inTxOn(ctx context.Context, db *sql.DB, op string, fn func(tx *sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return s.fail(op, err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback() // the error of fn is the one that matters
		return err
	}
	if err := tx.Commit(); err != nil {
		return s.fail(op, err)
	}
	return nil
}

func (s *Store) bumpRevision(ctx context.Context, tx *sql.Tx, op string) error {
	if _, err := s.exec(ctx, tx, `UPDATE policy_revision SET revision = revision + 1 WHERE id = 1`); err != nil {
		return s.fail(op+": bump policy revision", err)
	}
	return nil
}

// PublishBiome implements store.Store.
func (s *Store) PublishBiome(ctx context.Context, bv store.BiomeVersion, caps []store.Capability) error {
	op := fmt.Sprintf("publish biome %q version %q", bv.ID, bv.Version)
	if err := bv.Validate(); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	caps, err := ownCapabilities(bv, caps)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	bv.CreatedAt = store.Stamp(bv.CreatedAt)
	return s.inTx(ctx, op, func(tx *sql.Tx) error {
		stored, err := s.publishTx(ctx, tx, op, bv, caps)
		if err != nil || !stored {
			return err
		}
		return s.bumpRevision(ctx, tx, op)
	})
}

// publishTx is PublishBiome inside tx, for caps already checked by ownCapabilities. stored
// is false for an identical re-publish, which changes nothing.
func (s *Store) publishTx(ctx context.Context, tx *sql.Tx, op string, bv store.BiomeVersion, caps []store.Capability) (stored bool, err error) {
	if err := s.claimBiome(ctx, tx, op, bv); err != nil {
		return false, err
	}
	n, err := s.exec(ctx, tx, `INSERT INTO biome_versions
		(id, version, manifest, contributions, content_hash, digest_hash, digest, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id, version) DO NOTHING`,
		bv.ID, bv.Version, jsonArg(bv.Manifest), jsonArg(bv.Contributions), bv.ContentHash,
		bv.DigestHash, jsonArg(bv.Digest), s.d.TimeArg(bv.CreatedAt))
	if err != nil {
		return false, s.fail(op, err)
	}
	if n == 0 {
		return false, s.samePublished(ctx, tx, op, bv)
	}
	for _, c := range caps {
		if err := s.upsertCapability(ctx, tx, op, c); err != nil {
			return false, err
		}
	}
	return true, nil
}

// claimBiome records bv's owner as the owner of its id unless the id has one; an id owned by
// another org (or the operator) is ErrOwned.
func (s *Store) claimBiome(ctx context.Context, tx *sql.Tx, op string, bv store.BiomeVersion) error {
	if _, err := s.exec(ctx, tx, `INSERT INTO biome_owners (id, org, created_at) VALUES (?, ?, ?)
		ON CONFLICT (id) DO NOTHING`, bv.ID, bv.Owner, s.d.TimeArg(bv.CreatedAt)); err != nil {
		return s.fail(op, err)
	}
	var owner string
	if err := tx.QueryRowContext(ctx, s.d.bind(`SELECT org FROM biome_owners WHERE id = ?`), bv.ID).Scan(&owner); err != nil {
		return s.fail(op, err)
	}
	if owner != bv.Owner {
		return fmt.Errorf("%s: %w", op, store.ErrOwned)
	}
	return nil
}

// BiomeOwners implements store.Store.
func (s *Store) BiomeOwners(ctx context.Context) (map[string]string, error) {
	type owner struct{ id, org string }
	rows, err := list(ctx, s, "list biome owners", func(sc scanner) (owner, error) {
		var o owner
		return o, sc.Scan(&o.id, &o.org)
	}, `SELECT id, org FROM biome_owners`)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(rows))
	for _, o := range rows {
		out[o.id] = o.org
	}
	return out, nil
}

// ownCapabilities stamps the biome version on caps, and refuses a cap of another biome
// version, an invalid cap, and a ref given twice.
func ownCapabilities(bv store.BiomeVersion, caps []store.Capability) ([]store.Capability, error) {
	out := make([]store.Capability, len(caps))
	seen := make(map[string]bool, len(caps))
	for i, c := range caps {
		if c.BiomeID == "" && c.BiomeVersion == "" {
			c.BiomeID, c.BiomeVersion = bv.ID, bv.Version
		}
		if c.BiomeID != bv.ID || c.BiomeVersion != bv.Version {
			return nil, fmt.Errorf("%w: capability %q: BiomeID/BiomeVersion %q/%q differ from the published %q/%q",
				store.ErrInvalid, c.Ref, c.BiomeID, c.BiomeVersion, bv.ID, bv.Version)
		}
		if err := c.Validate(); err != nil {
			return nil, err
		}
		if seen[c.Ref] {
			return nil, fmt.Errorf("%w: capability %q given twice", store.ErrConflict, c.Ref)
		}
		seen[c.Ref] = true
		out[i] = c
	}
	return out, nil
}

// samePublished decides a re-publish: identical content is a no-op, other content a conflict.
func (s *Store) samePublished(ctx context.Context, tx *sql.Tx, op string, bv store.BiomeVersion) error {
	var hash string
	err := tx.QueryRowContext(ctx, s.d.bind(`SELECT content_hash FROM biome_versions WHERE id = ? AND version = ?`),
		bv.ID, bv.Version).Scan(&hash)
	if err != nil {
		return s.fail(op, err)
	}
	if hash != bv.ContentHash {
		return fmt.Errorf("%s: %w: already stored with content hash %q, not %q", op, store.ErrConflict, hash, bv.ContentHash)
	}
	return nil
}

// upsertCapability writes c unless another biome owns its ref. An update keeps the stored
// lifecycle: it moves only through TransitionLifecycle.
func (s *Store) upsertCapability(ctx context.Context, tx *sql.Tx, op string, c store.Capability) error {
	n, err := s.exec(ctx, tx, `INSERT INTO capabilities
		(ref, biome_id, biome_version, manifest, invocation, runner_kind, lifecycle, replaced_by, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (ref) DO UPDATE SET biome_version = excluded.biome_version, manifest = excluded.manifest,
			invocation = excluded.invocation, runner_kind = excluded.runner_kind, updated_at = excluded.updated_at
		WHERE capabilities.biome_id = excluded.biome_id`,
		c.Ref, c.BiomeID, c.BiomeVersion, jsonArg(c.Manifest), jsonArg(c.Invocation), c.RunnerKind,
		c.Lifecycle, c.ReplacedBy, s.d.TimeArg(store.Stamp(c.UpdatedAt)))
	if err != nil {
		return s.fail(fmt.Sprintf("%s: capability %q", op, c.Ref), err)
	}
	if n == 0 {
		var owner string
		if err := tx.QueryRowContext(ctx, s.d.bind(`SELECT biome_id FROM capabilities WHERE ref = ?`), c.Ref).Scan(&owner); err != nil {
			return s.fail(fmt.Sprintf("%s: capability %q", op, c.Ref), err)
		}
		return fmt.Errorf("%s: %w: capability %q belongs to biome %q", op, store.ErrConflict, c.Ref, owner)
	}
	return nil
}

const biomeVersionColumns = `id, version, manifest, contributions, content_hash, digest_hash, digest, created_at`

func scanBiomeVersion(sc scanner) (store.BiomeVersion, error) {
	var bv store.BiomeVersion
	var manifest, contributions, digest []byte
	err := sc.Scan(&bv.ID, &bv.Version, &manifest, &contributions, &bv.ContentHash, &bv.DigestHash, &digest,
		timeCol{&bv.CreatedAt})
	bv.Manifest, bv.Contributions, bv.Digest = jsonCol(manifest), jsonCol(contributions), jsonCol(digest)
	return bv, err
}

// GetBiomeVersion implements store.Store.
func (s *Store) GetBiomeVersion(ctx context.Context, id, version string) (store.BiomeVersion, error) {
	row := s.db.QueryRowContext(ctx, s.d.bind(`SELECT `+biomeVersionColumns+` FROM biome_versions WHERE id = ? AND version = ?`), id, version)
	bv, err := scanBiomeVersion(row)
	if err != nil {
		return store.BiomeVersion{}, s.fail(fmt.Sprintf("get biome %q version %q", id, version), err)
	}
	return bv, nil
}

// ListBiomeVersions implements store.Store.
func (s *Store) ListBiomeVersions(ctx context.Context, id string) ([]store.BiomeVersion, error) {
	return list(ctx, s, fmt.Sprintf("list versions of biome %q", id), scanBiomeVersion,
		`SELECT `+biomeVersionColumns+` FROM biome_versions WHERE id = ? ORDER BY created_at, seq`, id)
}

// list runs a query and scans each row with scan.
func list[T any](ctx context.Context, s *Store, op string, scan func(scanner) (T, error), q string, args ...any) ([]T, error) {
	return listOn(ctx, s, s.db, op, scan, q, args...)
}

// listOn is list on c (a transaction).
func listOn[T any](ctx context.Context, s *Store, c conn, op string, scan func(scanner) (T, error), q string, args ...any) ([]T, error) {
	rows, err := c.QueryContext(ctx, s.d.bind(q), args...)
	if err != nil {
		return nil, s.fail(op, err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, s.fail(op, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail(op, err)
	}
	return out, nil
}

// UpsertCapability implements store.Store.
func (s *Store) UpsertCapability(ctx context.Context, c store.Capability) error {
	op := fmt.Sprintf("upsert capability %q", c.Ref)
	if err := c.Validate(); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return s.inTx(ctx, op, func(tx *sql.Tx) error {
		if err := s.upsertCapability(ctx, tx, op, c); err != nil {
			return err
		}
		return s.bumpRevision(ctx, tx, op)
	})
}

const capabilityColumns = `ref, biome_id, biome_version, manifest, invocation, runner_kind, lifecycle, replaced_by, updated_at`

func scanCapability(sc scanner) (store.Capability, error) {
	var c store.Capability
	var manifest, invocation []byte
	err := sc.Scan(&c.Ref, &c.BiomeID, &c.BiomeVersion, &manifest, &invocation, &c.RunnerKind, &c.Lifecycle,
		&c.ReplacedBy, timeCol{&c.UpdatedAt})
	c.Manifest, c.Invocation = jsonCol(manifest), jsonCol(invocation)
	return c, err
}

// GetCapability implements store.Store.
func (s *Store) GetCapability(ctx context.Context, ref string) (store.Capability, error) {
	c, err := scanCapability(s.db.QueryRowContext(ctx, s.d.bind(`SELECT `+capabilityColumns+` FROM capabilities WHERE ref = ?`), ref))
	if err != nil {
		return store.Capability{}, s.fail(fmt.Sprintf("get capability %q", ref), err)
	}
	return c, nil
}

// ListCapabilities implements store.Store.
func (s *Store) ListCapabilities(ctx context.Context) ([]store.Capability, error) {
	return list(ctx, s, "list capabilities", scanCapability, `SELECT `+capabilityColumns+` FROM capabilities ORDER BY ref`)
}

// TransitionLifecycle implements store.Store: a compare-and-set on the stored state.
func (s *Store) TransitionLifecycle(ctx context.Context, ev store.LifecycleEvent) error {
	op := fmt.Sprintf("transition capability %q from %q to %q", ev.Ref, ev.From, ev.To)
	if err := ev.Validate(); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	ev.At = store.Stamp(ev.At)
	return s.inTx(ctx, op, func(tx *sql.Tx) error {
		if err := s.transitionTx(ctx, tx, op, ev); err != nil {
			return err
		}
		return s.bumpRevision(ctx, tx, op)
	})
}

// transitionTx is TransitionLifecycle inside tx, for a validated, stamped event.
func (s *Store) transitionTx(ctx context.Context, tx *sql.Tx, op string, ev store.LifecycleEvent) error {
	n, err := s.exec(ctx, tx, `UPDATE capabilities SET lifecycle = ?, replaced_by = ?, updated_at = ?
		WHERE ref = ? AND lifecycle = ?`, ev.To, ev.ReplacedBy, s.d.TimeArg(ev.At), ev.Ref, ev.From)
	if err != nil {
		return s.fail(op, err)
	}
	if n == 0 {
		var state string
		if err := tx.QueryRowContext(ctx, s.d.bind(`SELECT lifecycle FROM capabilities WHERE ref = ?`), ev.Ref).Scan(&state); err != nil {
			return s.fail(op, err)
		}
		return fmt.Errorf("%s: %w: capability is %q", op, store.ErrConflict, state)
	}
	if _, err := s.exec(ctx, tx, `INSERT INTO lifecycle_events (ref, from_state, to_state, replaced_by, actor, at)
		VALUES (?, ?, ?, ?, ?, ?)`, ev.Ref, ev.From, ev.To, ev.ReplacedBy, ev.Actor, s.d.TimeArg(ev.At)); err != nil {
		return s.fail(op, err)
	}
	return nil
}

// ListLifecycleEvents implements store.Store.
func (s *Store) ListLifecycleEvents(ctx context.Context, ref string) ([]store.LifecycleEvent, error) {
	return list(ctx, s, fmt.Sprintf("list lifecycle events of %q", ref),
		func(sc scanner) (store.LifecycleEvent, error) {
			var ev store.LifecycleEvent
			err := sc.Scan(&ev.Ref, &ev.From, &ev.To, &ev.ReplacedBy, &ev.Actor, timeCol{&ev.At})
			return ev, err
		},
		`SELECT ref, from_state, to_state, replaced_by, actor, at FROM lifecycle_events WHERE ref = ? ORDER BY seq`, ref)
}

// PutGrant implements store.Store.
func (s *Store) PutGrant(ctx context.Context, g store.Grant) error {
	op := fmt.Sprintf("put grant %q of biome %q version %q", g.ID, g.BiomeID, g.BiomeVersion)
	if err := g.Validate(); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return s.inTx(ctx, op, func(tx *sql.Tx) error {
		if _, err := s.exec(ctx, tx, `INSERT INTO grants
			(id, org, biome_id, biome_version, digest_hash, profile, customize, approved_by, approved_at, supersedes)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			g.ID, g.Org, g.BiomeID, g.BiomeVersion, g.DigestHash, g.Profile, jsonArg(g.Customize), g.ApprovedBy,
			s.d.TimeArg(store.Stamp(g.ApprovedAt)), g.Supersedes); err != nil {
			return s.fail(op, err)
		}
		return s.bumpRevision(ctx, tx, op)
	})
}

const grantColumns = `id, org, biome_id, biome_version, digest_hash, profile, customize, approved_by, approved_at,
	supersedes, revoked_by, revoked_at`

func scanGrant(sc scanner) (store.Grant, error) {
	var g store.Grant
	var customize []byte
	err := sc.Scan(&g.ID, &g.Org, &g.BiomeID, &g.BiomeVersion, &g.DigestHash, &g.Profile, &customize, &g.ApprovedBy,
		timeCol{&g.ApprovedAt}, &g.Supersedes, &g.RevokedBy, nullTimeCol{&g.RevokedAt})
	g.Customize = jsonCol(customize)
	return g, err
}

// ListGrants implements store.Store.
func (s *Store) ListGrants(ctx context.Context) ([]store.Grant, error) {
	return list(ctx, s, "list grants", scanGrant, `SELECT `+grantColumns+` FROM grants ORDER BY approved_at, id`)
}

// RevokeGrant implements store.Store.
func (s *Store) RevokeGrant(ctx context.Context, org, id, by string, at time.Time) (store.Grant, error) {
	op := fmt.Sprintf("revoke grant %q", id)
	if org == "" || id == "" || by == "" {
		return store.Grant{}, fmt.Errorf("%s: org, id and revoker are required: %w", op, store.ErrInvalid)
	}
	var g store.Grant
	err := s.inTx(ctx, op, func(tx *sql.Tx) error {
		n, err := s.exec(ctx, tx, `UPDATE grants SET revoked_by = ?, revoked_at = ?
			WHERE id = ? AND org = ? AND revoked_at IS NULL`, by, s.d.TimeArg(store.Stamp(at)), id, org)
		if err != nil {
			return s.fail(op, err)
		}
		if g, err = scanGrant(tx.QueryRowContext(ctx, s.d.bind(`SELECT `+grantColumns+` FROM grants WHERE id = ? AND org = ?`), id, org)); err != nil {
			return s.fail(op, err)
		}
		if n == 0 {
			return fmt.Errorf("%s: revoked already by %s: %w", op, g.RevokedBy, store.ErrConflict)
		}
		return s.bumpRevision(ctx, tx, op)
	})
	return g, err
}

// AppendAudit implements store.Store.
func (s *Store) AppendAudit(ctx context.Context, r store.AuditRecord) error {
	op := fmt.Sprintf("append audit record %q", r.ID)
	if err := r.Validate(); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if _, err := s.exec(ctx, s.db, `INSERT INTO audit_log
		(`+auditColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		s.auditArgs(nil, r)...); err != nil {
		return s.fail(op, err)
	}
	return nil
}

// scanAudit reads one audit_log row of auditColumns.
func scanAudit(sc scanner) (store.AuditRecord, error) {
	var r store.AuditRecord
	var reasons, suggestions, obligations, detail, policyInput []byte
	err := sc.Scan(&r.ID, timeCol{&r.Time}, &r.Ref, &r.SubjectKind, &r.SubjectRef,
		&r.Environment, &r.Decision, &reasons, &suggestions, &obligations, &r.BundleRevision, &r.InputHash,
		&r.Runner, &r.Outcome, &r.LatencyMicros, &r.ParentID, &detail, &r.Org,
		&policyInput, &r.Chain.ChainID, &r.Chain.Seq, &r.Chain.Hash)
	r.Reasons, r.Suggestions, r.Obligations = jsonCol(reasons), jsonCol(suggestions), jsonCol(obligations)
	r.Detail, r.PolicyInput = jsonCol(detail), jsonCol(policyInput)
	return r, err
}

// auditPage is how many records ScanAudit reads per query.
const auditPage = 1000

// ScanAudit implements store.Store: keyset pages, by (chain_seq) for one chain, else by
// (time, id).
func (s *Store) ScanAudit(ctx context.Context, f store.AuditFilter, fn func(store.AuditRecord) error) error {
	var where []string
	var args []any
	add := func(cond string, v any) { where = append(where, cond); args = append(args, v) }
	where, args = s.auditRange(where, args, f.Since, f.Until)
	if f.Org != "" {
		add("org = ?", f.Org)
	}
	if f.Replayable {
		where = append(where, "policy_input IS NOT NULL")
	}
	if f.ChainID != "" {
		// The chain index is partial (chain_id <> ''): the planner uses it only when the
		// query names that condition too (a bound chain id does not prove it).
		add("chain_id = ? AND chain_id <> ''", f.ChainID)
	}
	if f.Unchained {
		where = append(where, "chain_id = ''")
	}
	var lastSeq int64
	var lastTime time.Time
	lastID, first := "", true
	for {
		cond, cargs := slices.Clone(where), slices.Clone(args)
		order := "time, id"
		switch {
		case f.ChainID != "":
			order = "chain_seq"
			if !first {
				cond, cargs = append(cond, "chain_seq > ?"), append(cargs, lastSeq)
			}
		case !first:
			cond, cargs = s.auditKeyset(cond, cargs, ">", lastTime, lastID)
		}
		q := `SELECT ` + auditColumns + ` FROM audit_log`
		if len(cond) > 0 {
			q += ` WHERE ` + strings.Join(cond, " AND ")
		}
		q += ` ORDER BY ` + order + ` LIMIT ?`
		page, err := list(ctx, s, "scan audit log", scanAudit, q, append(cargs, auditPage)...)
		if err != nil {
			return err
		}
		for _, r := range page {
			if err := fn(r); err != nil {
				return err
			}
		}
		if len(page) < auditPage {
			return nil
		}
		last := page[len(page)-1]
		lastSeq, lastTime, lastID, first = last.Chain.Seq, last.Time, last.ID, false
	}
}

// ChainHeads implements store.Store.
func (s *Store) ChainHeads(ctx context.Context) ([]store.ChainHead, error) {
	return list(ctx, s, "list audit chain heads", func(sc scanner) (store.ChainHead, error) {
		var h store.ChainHead
		return h, sc.Scan(&h.ChainID, &h.Seq, &h.Hash, timeCol{&h.UpdatedAt}, &h.BaseSeq, &h.BaseHash, &h.BaseMAC, &h.MAC)
	}, `SELECT chain_id, seq, hash, updated_at, base_seq, base_hash, base_mac, mac FROM audit_chain_heads ORDER BY chain_id`)
}

// RegisterChain implements store.Store.
func (s *Store) RegisterChain(ctx context.Context, reg store.ChainRegistration, head store.ChainHead) error {
	op := fmt.Sprintf("register audit chain %q", reg.ChainID)
	if reg.No < 1 || reg.ChainID == "" || reg.MAC == "" || reg.Legacy < 0 || head.ChainID != reg.ChainID || head.Seq != 0 || head.MAC == "" {
		return fmt.Errorf("%s: %w: a registration needs a number from 1, a chain id, a MAC and its chain's empty head with a MAC", op, store.ErrInvalid)
	}
	return s.inTx(ctx, op, func(tx *sql.Tx) error {
		if _, err := s.exec(ctx, tx, `INSERT INTO audit_chains (no, chain_id, registered_at, legacy, anchor, mac) VALUES (?, ?, ?, ?, ?, ?)`,
			reg.No, reg.ChainID, s.d.TimeArg(store.Stamp(reg.RegisteredAt)), reg.Legacy, reg.Anchor, reg.MAC); err != nil {
			return s.fail(op, err)
		}
		if _, err := s.exec(ctx, tx, `INSERT INTO audit_chain_heads (chain_id, seq, hash, updated_at, mac) VALUES (?, 0, '', ?, ?)`,
			head.ChainID, s.d.TimeArg(store.Stamp(reg.RegisteredAt)), head.MAC); err != nil {
			return s.fail(op, err)
		}
		return nil
	})
}

// ChainRegistrations implements store.Store.
func (s *Store) ChainRegistrations(ctx context.Context) ([]store.ChainRegistration, error) {
	return list(ctx, s, "list audit chain registrations", func(sc scanner) (store.ChainRegistration, error) {
		var r store.ChainRegistration
		return r, sc.Scan(&r.No, &r.ChainID, timeCol{&r.RegisteredAt}, &r.Legacy, &r.Anchor, &r.MAC)
	}, `SELECT no, chain_id, registered_at, legacy, anchor, mac FROM audit_chains ORDER BY no`)
}

// GetAudit implements store.Store.
func (s *Store) GetAudit(ctx context.Context, id string) (store.AuditRecord, error) {
	r, err := scanAudit(s.db.QueryRowContext(ctx, s.d.bind(`SELECT `+auditColumns+` FROM audit_log WHERE id = ?`), id))
	if err != nil {
		return store.AuditRecord{}, s.fail(fmt.Sprintf("get audit record %q", id), err)
	}
	return r, nil
}

// Revision implements store.Store.
func (s *Store) Revision(ctx context.Context) (int64, error) {
	var rev int64
	if err := s.db.QueryRowContext(ctx, `SELECT revision FROM policy_revision WHERE id = 1`).Scan(&rev); err != nil {
		return 0, s.fail("read policy revision", err)
	}
	return rev, nil
}

// Ping implements store.Store.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("ping %s store: %w: %w", s.d.Name, store.ErrUnavailable, err)
	}
	return nil
}

// Close implements store.Store.
func (s *Store) Close() error {
	s.stmts.Range(func(_, st any) bool {
		_ = st.(*sql.Stmt).Close() // closing the database releases them anyway
		return true
	})
	if s.counters != s.db {
		_ = s.counters.Close() // one handle's error is enough to report
	}
	return s.db.Close()
}
