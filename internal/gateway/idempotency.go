package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

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
	// CodeIdempotencyKeyReused (422): the key was used for another call (ref or input).
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
	CodeCapacityExceeded: true, CodeRateLimited: true, CodeQuotaExceeded: true, CodeApprovalUnavailable: true}

// InvokeIdempotent is Invoke under an idempotency key: the same key from the same caller (org
// and subject) within IdempotencyTTL returns the first call's answer instead of running
// again; another ref or input under the key is a 422. A key with no store configured is a
// 503: a client relying on the key must not get a second run silently.
// encode renders Invoke's result as the answer to store and send (the edge's mapping) and
// names its error code ("" for success).
func (g *Gateway) InvokeIdempotent(ctx context.Context, ec identity.ExecContext, req Request, key string,
	encode func(*Result, error) (Answer, string)) (Answer, error) {
	if len(key) == 0 || len(key) > MaxIdempotencyKey || !printable(key) {
		return Answer{}, badRequest(CodeInvalidIdempotencyKey,
			fmt.Sprintf("an idempotency key is 1 to %d printable ASCII characters", MaxIdempotencyKey))
	}
	if g.d.Idempotency == nil {
		return Answer{}, &fault.Error{Kind: fault.Unavailable, Code: CodeStoreUnavailable,
			Message: "idempotency keys are not available on this gateway; the call was not run"}
	}
	now := time.Now()
	rec := store.IdempotencyRecord{Org: ec.Org, Subject: ec.Subject.Ref, Key: key, InputHash: requestHash(req),
		CreatedAt: now, ExpiresAt: now.Add(IdempotencyTTL)}
	stored, claimed, err := g.d.Idempotency.ClaimIdempotency(ctx, rec)
	if err != nil {
		return Answer{}, unavailable(CodeStoreUnavailable, "idempotency store", err)
	}
	if !claimed {
		switch {
		case stored.InputHash != rec.InputHash:
			return Answer{}, &fault.Error{Kind: fault.Unprocessable, Code: CodeIdempotencyKeyReused,
				Message: "this Idempotency-Key was used for another call (other ref or input); use a new key"}
		case stored.State != store.IdempotencyDone:
			return Answer{}, &fault.Error{Kind: fault.Conflict, Code: CodeIdempotencyKeyInUse, AuditID: stored.AuditID,
				Message: fmt.Sprintf("the call made with this Idempotency-Key at %s is running, or ran without its answer being "+
					"stored; it is not run again", stored.CreatedAt.UTC().Format(time.RFC3339))}
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

// requestHash identifies what a call asked: its ref and its input, whitespace aside.
func requestHash(req Request) string {
	var in bytes.Buffer
	if err := json.Compact(&in, req.Input); err != nil {
		in.Reset()
		in.Write(req.Input)
	}
	h := sha256.New()
	h.Write([]byte(req.Ref))
	h.Write([]byte{0})
	h.Write(in.Bytes())
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
