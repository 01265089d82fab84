package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/xemahq/xema/internal/capacity"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/spool"
	"github.com/xemahq/xema/internal/store"
)

// IdempotencyTTL is how long the first answer under a key is returned to its caller.
const IdempotencyTTL = 24 * time.Hour

// MaxIdempotencyKey is the longest key accepted.
const MaxIdempotencyKey = 255

// Answer codes of the idempotency layer.
const (
	CodeInvalidIdempotencyKey = "INVALID_IDEMPOTENCY_KEY"
	// CodeIdempotencyKeyReused (422): the key was used for another call (ref or input) or
	// under another decision context (environment, armed set, project, session, groups, roles).
	CodeIdempotencyKeyReused = "IDEMPOTENCY_KEY_REUSED"
	// CodeIdempotencyKeyInUse (409): the first call under the key is running, or it ran and
	// its answer was never stored (the gateway stopped): it is not run again.
	CodeIdempotencyKeyInUse = "IDEMPOTENCY_KEY_IN_USE"
)

// Answer is an invocation's answer as sent: status and JSON body.
type Answer struct {
	Status int
	Body   json.RawMessage
	// Replayed is true when the answer is the stored one of an earlier call.
	Replayed bool
	// RetryAfter is the Retry-After seconds of a refusal a retry may pass (never stored:
	// such answers are not run, so their key is released).
	RetryAfter int
}

// notRun are the codes of answers given before anything ran: a retry under the same key
// must run the call, so their key is released rather than stored.
var notRun = map[string]bool{CodeAuditUnavailable: true, CodeStoreUnavailable: true, CodePolicyUnavailable: true,
	capacity.CodeExceeded: true, CodeRateLimited: true, CodeQuotaExceeded: true, CodeApprovalUnavailable: true}

// InvokeIdempotent is Invoke under an idempotency key: the same key from the same caller (org
// and subject) in the same decision context within IdempotencyTTL returns the first call's
// answer instead of running again; another ref, input or decision context under the key is a
// 422. A replay is a decision of its own (Replay): authorized again under the policy serving
// now and audited. A key with no store configured is a 503: a client relying on the key must
// not get a second run silently.
// encode renders Invoke's result as the answer to store and send (the edge's mapping) and
// names its error code ("" for success).
func (g *Gateway) InvokeIdempotent(ctx context.Context, ec identity.ExecContext, req Request, key string,
	encode func(*Result, error) (Answer, string)) (Answer, error) {
	if len(key) == 0 || len(key) > MaxIdempotencyKey || !printable(key) {
		return Answer{}, fault.New(fault.Invalid, CodeInvalidIdempotencyKey,
			"an idempotency key is 1 to %d printable ASCII characters", MaxIdempotencyKey)
	}
	if g.d.Idempotency == nil {
		return Answer{}, &fault.Error{Kind: fault.Unavailable, Code: CodeStoreUnavailable,
			Message: "idempotency keys are not available on this gateway; the call was not run"}
	}
	now := time.Now()
	rec := store.IdempotencyRecord{Org: ec.Org, Subject: ec.Subject.Ref, Key: key, InputHash: scopeHash(ec, req),
		CreatedAt: now, ExpiresAt: now.Add(IdempotencyTTL)}
	stored, claimed, err := g.d.Idempotency.ClaimIdempotency(ctx, rec)
	if err != nil {
		return Answer{}, unavailable(CodeStoreUnavailable, "idempotency store", err)
	}
	if !claimed {
		switch {
		case stored.InputHash != rec.InputHash:
			return Answer{}, &fault.Error{Kind: fault.Unprocessable, Code: CodeIdempotencyKeyReused,
				Message: "this Idempotency-Key was used for another call (other ref, input or token context); use a new key"}
		case stored.State != store.IdempotencyDone:
			return Answer{}, &fault.Error{Kind: fault.Conflict, Code: CodeIdempotencyKeyInUse, AuditID: stored.AuditID,
				Message: fmt.Sprintf("the call made with this Idempotency-Key at %s is running, or ran without its answer being "+
					"stored; it is not run again", stored.CreatedAt.UTC().Format(time.RFC3339))}
		}
		res, err := g.Replay(ctx, ec, req, stored.AuditID)
		if res != nil || err != nil {
			ans, _ := encode(res, err)
			return ans, nil
		}
		return Answer{Status: stored.Status, Body: stored.Body, Replayed: true}, nil
	}
	ans, code := encode(g.Invoke(ctx, ec, req))
	done := context.WithoutCancel(ctx)
	if notRun[code] {
		_ = g.d.Idempotency.ReleaseIdempotency(done, ec.Org, ec.Subject.Ref, key) // a failed release leaves the key in use: safe
		return ans, nil
	}
	c := store.IdempotencyCompletion{Org: ec.Org, Subject: ec.Subject.Ref, Key: key, Status: ans.Status, Body: ans.Body,
		AuditID: auditIDOf(ans.Body)}
	if err := g.d.Idempotency.CompleteIdempotency(done, c); err != nil && !errors.Is(err, store.ErrConflict) {
		g.d.Spool.Add(spool.Entry{Idempotency: &c})
	}
	return ans, nil
}

func auditIDOf(body json.RawMessage) string {
	var v struct {
		AuditID string `json:"auditId"`
	}
	_ = json.Unmarshal(body, &v)
	return v.AuditID
}

// scopeHash identifies what a call asked and in which decision context: its ref, its input
// (whitespace aside), and every verified claim the policy decides on beyond org and subject
// (the store's key). Sets are sorted: the same claims in another order are the same context.
func scopeHash(ec identity.ExecContext, req Request) string {
	var in bytes.Buffer
	if err := json.Compact(&in, req.Input); err != nil {
		in.Reset()
		in.Write(req.Input)
	}
	sorted := func(s []string) []string { return slices.Sorted(slices.Values(s)) }
	scope := struct {
		Kind        string   `json:"kind"`
		OrgRole     string   `json:"orgRole"`
		Environment string   `json:"environment"`
		Project     string   `json:"project"`
		Session     string   `json:"session"`
		Armed       []string `json:"armed"`
		Groups      []string `json:"groups"`
		Roles       []string `json:"roles"`
	}{ec.Subject.Kind, ec.OrgRole, ec.Environment, ec.Project, ec.Session, sorted(ec.Armed), sorted(ec.Groups), sorted(ec.Roles)}
	h := sha256.New()
	h.Write([]byte(req.Ref))
	h.Write([]byte{0})
	h.Write(in.Bytes())
	h.Write([]byte{0})
	h.Write(mustJSON(scope))
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
