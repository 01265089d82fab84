// Package sqlstore implements store.Store once, over database/sql, for every SQL engine: an
// engine package (sqlite, postgres) supplies its connection and a Dialect, the few things in
// which the engines differ.
package sqlstore

import (
	"database/sql"
	"database/sql/driver"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Dialect is what differs between engines.
type Dialect struct {
	// Name is the engine's directory under migrations/.
	Name string
	// NumberedParams rewrites the '?' placeholders of the shared queries to $1, $2, ...
	NumberedParams bool
	// TimeArg turns a stamped time into a query argument of the engine's time column.
	TimeArg func(time.Time) any
	// Classify maps an engine error to store.ErrConflict, ErrNotFound, ErrInvalid or
	// ErrUnavailable, or nil when the error is none of those.
	Classify func(error) error
	// MigrationLock, when set, runs first in each migration transaction so that replicas
	// starting together apply each migration once.
	MigrationLock string
	// PrepareBatches runs the audit batch's statements, and the reads made on every call
	// (Store.callRow), prepared once (see Store.prepared): for a driver that parses a query's
	// text on every Exec (SQLite's), not for one that caches statements itself (pgx: an
	// explicit Prepare there only adds round trips).
	PrepareBatches bool
	// ReasonCodeMatch is a boolean SQL expression with one '?' (a reason code), true when
	// one element of the audit_log row's reasons array has that code.
	ReasonCodeMatch string
	// Greatest and Least are the engine's two-argument maximum and minimum, for the
	// rollups' extremes.
	Greatest, Least string
	// RollupLock, when set, runs first in the rollup pass's transaction and in a prune's
	// delete, so that they take turns across replicas (SQLite's one writer needs none).
	RollupLock string
	// SnapshotTx are the options of AuditStats's read transaction: one snapshot for the
	// rollups, their watermarks and the records past them.
	SnapshotTx *sql.TxOptions
	// InsertOrFail: the audit batch's INSERT resolves its constraints with FAIL (SQLite's
	// INSERT OR FAIL, with the FAIL of the append-only trigger, migration 0011): no part of
	// the statement can roll back alone, so the engine keeps no statement journal for it (5 %
	// of a batch's CPU); a failed statement fails its transaction, which the store rolls back.
	InsertOrFail bool
	// ModifyingCTE: the engine runs an INSERT inside WITH, so AddUsage adds several counters
	// in one statement (usageAddsAtOnce) instead of a transaction of one per counter.
	ModifyingCTE bool
	// AfterPruneBatch, when set, runs after each batch of DeletePrunedAudit: SQLite's
	// incremental vacuum, returning the freed pages to the file system a few at a time.
	AfterPruneBatch string
}

// bind adapts a shared query to the dialect's placeholders. The shared queries hold no '?'
// other than placeholders.
func (d Dialect) bind(q string) string {
	if !d.NumberedParams {
		return q
	}
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// timeCol scans a time column stored either as a native timestamp or as Unix microseconds.
type timeCol struct{ t *time.Time }

func (c timeCol) Scan(v any) error {
	switch v := v.(type) {
	case time.Time:
		*c.t = v.UTC()
	case int64:
		*c.t = time.UnixMicro(v).UTC()
	default:
		return fmt.Errorf("time column holds %T", v)
	}
	return nil
}

// nullTimeCol is timeCol of a nullable column: NULL scans as the zero time.
type nullTimeCol struct{ t *time.Time }

func (c nullTimeCol) Scan(v any) error {
	if v == nil {
		*c.t = time.Time{}
		return nil
	}
	return timeCol(c).Scan(v)
}

// jsonArg is a JSON document as a query argument: NULL when absent.
func jsonArg(doc []byte) driver.Value {
	if len(doc) == 0 {
		return nil
	}
	return string(doc)
}

// jsonCol returns a scanned JSON column as a document: nil for NULL.
func jsonCol(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}
