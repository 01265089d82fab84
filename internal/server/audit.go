package server

import (
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/xemahq/xema/internal/audit"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/store"
)

func (s *Server) auditRoutes(g *echo.Group) {
	g.GET("/audit", s.auditSearch)
	g.GET("/profiles", s.profiles)
	g.GET("/audit/:id", s.auditRecord)
	g.GET("/audit/:id/why-denied", s.whyDenied)
}

// loadAudit returns the record if the caller may read it: a record of the caller's org, made
// by the caller or read by an administrator of that org. Records of no org (requests refused
// before a token named one) belong to the operator: administrators of the operator's org
// read them. Anything else is answered like an unknown id.
func (s *Server) loadAudit(c echo.Context) (store.AuditRecord, error) {
	id := c.Param("id")
	rec, err := s.Audit.GetAudit(c.Request().Context(), id)
	notFound := fault.New(fault.NotFound, CodeUnknownAuditID, "no audit record %s", id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return rec, notFound
	case err != nil:
		return rec, auditUnavailable()
	}
	ec := execOf(c)
	if !s.mayRead(ec, rec) {
		return store.AuditRecord{}, notFound
	}
	return rec, nil
}

func (s *Server) auditRecord(c echo.Context) error {
	rec, err := s.loadAudit(c)
	if err != nil {
		return err
	}
	view := audit.View(rec)
	if outcome, err := s.Audit.GetAudit(c.Request().Context(), audit.OutcomeID(rec.ID)); err == nil && outcome.Org == rec.Org {
		view.Runner, view.Outcome, view.LatencyMicros = outcome.Runner, outcome.Outcome, outcome.LatencyMicros
	}
	if ag := view.Aggregate; ag != nil && ag.Total == 0 {
		// An opening record: the bucket's total is on its closing record once written, else
		// (still open, or one attempt) the count so far is 1 as far as the log knows.
		ag.Total = ag.Count
		if closing, err := s.Audit.GetAudit(c.Request().Context(), audit.AggregateCountID(rec.ID)); err == nil {
			if cl := audit.AggregateOf(closing); cl != nil {
				ag.Total, ag.Until = cl.Total, cl.Until
			}
		}
	}
	return c.JSON(http.StatusOK, view)
}

func (s *Server) whyDenied(c echo.Context) error {
	rec, err := s.loadAudit(c)
	if err != nil {
		return err
	}
	d, ok := audit.WhyDenied(rec)
	if !ok {
		return fault.New(fault.Conflict, CodeNotADenial, "audit record %s is not a denial: its decision is %s", rec.ID, rec.Decision)
	}
	x, err := s.Tools.WhyDenied(rec.Org, d)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, x)
}

func (s *Server) mayRead(ec identity.ExecContext, rec store.AuditRecord) bool {
	switch rec.Org {
	case "":
		return s.OperatorOrg != "" && ec.Org == s.OperatorOrg && ec.OrgAdmin()
	case ec.Org:
		return rec.SubjectRef == ec.Subject.Ref || ec.OrgAdmin()
	}
	return false
}
