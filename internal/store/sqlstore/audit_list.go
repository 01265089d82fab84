package sqlstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/xemahq/xema/internal/store"
)

// ListAudit implements store.Store: one org's records, newest first, keyset-paginated on
// (time, id) so a page never shifts when new records arrive. Served by the indexes
// audit_log_org_time, audit_log_org_subject_time and audit_log_org_ref_time.
func (s *Store) ListAudit(ctx context.Context, f store.AuditQuery) ([]store.AuditRecord, error) {
	where := []string{"org = ?"}
	args := []any{f.Org}
	for _, eq := range []struct{ col, v string }{
		{"subject_ref", f.SubjectRef}, {"ref", f.Ref}, {"decision", f.Decision}, {"parent_id", f.ParentID},
	} {
		if eq.v != "" {
			where = append(where, eq.col+" = ?")
			args = append(args, eq.v)
		}
	}
	if f.ReasonCode != "" {
		where = append(where, s.d.ReasonCodeMatch)
		args = append(args, f.ReasonCode)
	}
	if !f.Since.IsZero() {
		where = append(where, "time >= ?")
		args = append(args, s.d.TimeArg(f.Since.UTC().Truncate(time.Microsecond)))
	}
	if !f.Until.IsZero() {
		where = append(where, "time < ?")
		args = append(args, s.d.TimeArg(f.Until.UTC().Truncate(time.Microsecond)))
	}
	if b := f.Before; b != nil {
		t := s.d.TimeArg(b.Time.UTC().Truncate(time.Microsecond))
		where = append(where, "(time < ? OR (time = ? AND id < ?))")
		args = append(args, t, t, b.ID)
	}
	limit := f.Limit
	if limit <= 0 || limit > store.MaxAuditPage {
		limit = store.MaxAuditPage
	}
	return list(ctx, s, "list audit records", scanAudit,
		`SELECT `+auditColumns+` FROM audit_log WHERE `+strings.Join(where, " AND ")+
			fmt.Sprintf(` ORDER BY time DESC, id DESC LIMIT %d`, limit), args...)
}
