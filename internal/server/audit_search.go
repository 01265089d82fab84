package server

import (
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/xemahq/xema/internal/approval"
	"github.com/xemahq/xema/internal/audit"
	"github.com/xemahq/xema/internal/grant"
	"github.com/xemahq/xema/internal/insight"
	"github.com/xemahq/xema/internal/store"
	"github.com/xemahq/xema/internal/timearg"
)

// Page sizes of GET /v1/audit.
const (
	DefaultAuditPage = 50
	MaxAuditPage     = 100
)

// auditDecisions are the decisions the log records, the values ?decision= accepts.
var auditDecisions = []string{
	audit.DecisionAllowed, audit.DecisionDenied, audit.DecisionPendingApproval, audit.DecisionInvalid,
	audit.DecisionNotFound, audit.DecisionError, audit.DecisionUnauthenticated,
	approval.DecisionApproved, approval.DecisionRejected, approval.DecisionExpired, approval.DecisionWithdrawn,
}

var auditSearchParams = []string{"ref", "subject", "decision", "reason", "parent", "since", "until", "omit", "cursor", "limit"}

// omitPeopleReads is ?omit='s one value: leave out what people (subjects of kind user) read
// through the gateway's own read operations and were allowed to, i.e. their page loads in
// the console. Their denials and everything else stay.
const omitPeopleReads = insight.OmitPeopleReads

// AuditPage is the answer of GET /v1/audit.
type AuditPage struct {
	Records    []audit.Record `json:"records"`
	NextCursor string         `json:"nextCursor,omitempty"`
	// PrunedBefore is set when the window reaches before the audit retention's boundary:
	// records older than it were pruned (archived by the operator, if at all).
	PrunedBefore string `json:"prunedBefore,omitempty"`
}

func badParam(name, msg string) error {
	return invalidRequest("query parameter %q: %s", name, msg)
}

// auditSearch is GET /v1/audit: the caller's org's records newest first, the administrators
// of the org reading every subject's, anyone else only their own (the rule of GET
// /v1/audit/{id}, mayRead). Like that route it reads the log directly rather than through a
// kernel capability, so that reading the log does not write to it.
func (s *Server) auditSearch(c echo.Context) error {
	q := map[string]string{}
	known := map[string]bool{}
	for _, p := range auditSearchParams {
		known[p] = true
	}
	var unknown []string
	for k, vs := range c.QueryParams() {
		switch {
		case !known[k]:
			unknown = append(unknown, k)
		case len(vs) != 1:
			return badParam(k, fmt.Sprintf("given %d times, want once", len(vs)))
		case !utf8.ValidString(vs[0]) || strings.ContainsRune(vs[0], 0):
			// PostgreSQL refuses such text (a store error, not the caller's), SQLite would match nothing.
			return badParam(k, "not UTF-8 text, or holds a NUL")
		default:
			q[k] = vs[0]
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return invalidRequest("unknown query parameter(s) %s; want %s", strings.Join(unknown, ", "), strings.Join(auditSearchParams, ", "))
	}
	for _, k := range []string{"ref", "subject", "reason", "parent"} {
		if len(q[k]) > 300 {
			return badParam(k, "longer than 300 characters")
		}
	}
	if strings.ContainsAny(q["ref"], "*?[") {
		// Refs match exactly; a glob would silently match nothing.
		return badParam("ref", "globs are not supported: give an exact capability ref such as ticket:create@1")
	}
	ec := execOf(c)
	f := store.AuditQuery{Org: ec.Org, Ref: q["ref"], SubjectRef: q["subject"], ReasonCode: q["reason"], ParentID: q["parent"], Limit: DefaultAuditPage}
	if d := q["decision"]; d != "" {
		ok := false
		for _, known := range auditDecisions {
			ok = ok || d == known
		}
		if !ok {
			return badParam("decision", "want one of "+strings.Join(auditDecisions, ", "))
		}
		f.Decision = d
	}
	for _, tp := range []struct {
		name string
		into *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		if v := q[tp.name]; v != "" {
			t, err := timearg.Parse(v, time.Now())
			if err != nil {
				return badParam(tp.name, timearg.Want)
			}
			*tp.into = t
		}
	}
	switch q["omit"] {
	case "":
	case omitPeopleReads:
		f.Omit = &store.AuditOmit{SubjectKind: "user", Refs: s.Tools.OperationReads(ec.Org)}
	default:
		return badParam("omit", "want "+omitPeopleReads)
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		return badParam("until", "must be later than since")
	}
	if v, ok := q["limit"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxAuditPage {
			return badParam("limit", fmt.Sprintf("want an integer from 1 to %d", MaxAuditPage))
		}
		f.Limit = n
	}
	// The caller's own scope is part of the query a cursor is bound to: a cursor opens only
	// for the caller, role and filters that got it.
	queryKey := strings.Join([]string{"audit", ec.Org, ec.Subject.Ref, strconv.FormatBool(ec.OrgAdmin()),
		f.Ref, f.SubjectRef, f.Decision, f.ReasonCode, f.ParentID, q["since"], q["until"], q["omit"], strconv.Itoa(f.Limit)}, "\x00")
	if cur := q["cursor"]; cur != "" {
		pos, err := s.Tools.OpenPosition(cur, queryKey)
		if err != nil {
			return badParam("cursor", "not a cursor this query issued")
		}
		before, ok := parsePosition(pos)
		if !ok {
			return badParam("cursor", "not a cursor this query issued")
		}
		f.Before = &before
	}
	page := AuditPage{Records: []audit.Record{}}
	if ec.Org == "" || (!ec.OrgAdmin() && ec.Subject.Ref == "") {
		// Fail closed: org "" would be the operator's records of no org (mayRead gives those
		// to the operator's administrators only), and an empty subject ref would drop the
		// caller's own-records filter.
		return c.JSON(http.StatusOK, page)
	}
	if !ec.OrgAdmin() {
		if f.SubjectRef != "" && f.SubjectRef != ec.Subject.Ref {
			return c.JSON(http.StatusOK, page) // another subject's records: none the caller may read
		}
		f.SubjectRef = ec.Subject.Ref
	}
	want := f.Limit
	f.Limit++ // one more tells whether there is a next page
	recs, err := s.Audit.ListAudit(c.Request().Context(), f)
	if err != nil {
		return auditUnavailable()
	}
	if len(recs) > want {
		recs = recs[:want]
		last := recs[len(recs)-1]
		page.NextCursor = s.Tools.SealPosition(strconv.FormatInt(last.Time.UnixMicro(), 10)+"|"+last.ID, queryKey)
	}
	for _, r := range recs {
		page.Records = append(page.Records, audit.View(r))
	}
	pruned, err := s.Audit.PruneBoundary(c.Request().Context())
	if err != nil {
		return auditUnavailable()
	}
	if !pruned.Before.IsZero() && (f.Since.IsZero() || f.Since.Before(pruned.Before)) {
		page.PrunedBefore = pruned.Before.UTC().Format(time.RFC3339)
	}
	return c.JSON(http.StatusOK, page)
}

// profiles is GET /v1/profiles: the built-in permission profiles a grant may name, so a
// person approving a digest sees what a profile admits before confirming, and the named
// environments (name to kind) its customization and tokens may name.
func (s *Server) profiles(c echo.Context) error {
	envs := map[string]string{}
	for _, name := range s.Environments.Names() {
		envs[name], _ = s.Environments.Lookup(name)
	}
	return c.JSON(http.StatusOK, map[string]any{"profiles": grant.Builtin(), "environments": envs})
}

func parsePosition(pos string) (store.AuditPosition, bool) {
	micros, id, ok := strings.Cut(pos, "|")
	if !ok || id == "" {
		return store.AuditPosition{}, false
	}
	n, err := strconv.ParseInt(micros, 10, 64)
	if err != nil {
		return store.AuditPosition{}, false
	}
	return store.AuditPosition{Time: time.UnixMicro(n).UTC(), ID: id}, true
}
