// Package idempotency keeps the outcomes of calls made with an idempotency key, so a retry
// under the key returns the first call's answer instead of running it again. It is a layer
// between the edges (HTTP, MCP) and the funnel: it calls the funnel (Invoke, Replay), keeps
// what the funnel returned (a result, in the domain's terms), and answers a replay with the
// answer made of it by answer.Of, byte for byte the first call's; the funnel knows nothing
// of it. A key is released rather than kept only when the funnel says the call did not run
// (fault.Error.NotRun) and a retry may get past its refusal: no list of codes decides it.
package idempotency

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/xemahq/xema/internal/answer"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/gateway"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/outage"
	"github.com/xemahq/xema/internal/spool"
	"github.com/xemahq/xema/internal/store"
)

// TTL is how long the first answer under a key is returned to its caller.
const TTL = 24 * time.Hour

// MaxKey is the longest key accepted.
const MaxKey = 255

// Answer codes of the idempotency layer.
const (
	CodeInvalidKey = "INVALID_IDEMPOTENCY_KEY"
	// CodeKeyReused (422): the key was used for another call (ref or input) or under another
	// decision context (environment, armed set, project, session, groups, roles).
	CodeKeyReused = "IDEMPOTENCY_KEY_REUSED"
	// CodeKeyInUse (409): the first call under the key is running, or it ran and its answer
	// was never stored (the gateway stopped): it is not run again.
	CodeKeyInUse = "IDEMPOTENCY_KEY_IN_USE"
	// CodeResultUnreadable (500): the stored outcome of the first call under the key does
	// not decode (a damaged row, or a kind this release does not know): it is not run again,
	// and nothing is made up in its place.
	CodeResultUnreadable = "IDEMPOTENCY_RESULT_UNREADABLE"
)

// Funnel is what the layer calls (gateway.Gateway).
type Funnel interface {
	Invoke(ctx context.Context, ec identity.ExecContext, req gateway.Request) (*gateway.Result, error)
	Replay(ctx context.Context, ec identity.ExecContext, req gateway.Request, parentAuditID string) (*gateway.Result, error)
}

// Keys is the layer over a funnel and the store of keys.
type Keys struct {
	Funnel Funnel
	// Store keeps the keys, shared by every replica; nil refuses every key (503).
	Store store.IdempotencyStore
	// Spool keeps the outcomes the store could not take, and writes them once it is back.
	Spool *spool.Spool
	// Outages logs the key store's outages, which readiness reads; nil logs none.
	Outages *outage.Tracker
}

// Invoke is the funnel's Invoke under an idempotency key: the same key from the same caller
// (org and subject) in the same decision context within TTL returns the first call's answer
// instead of running again; another ref, input or decision context under the key is a 422. A
// replay is a decision of its own (gateway.Replay): authorized again under the policy serving
// now and audited; a stored outcome that does not decode is a 500 (CodeResultUnreadable),
// neither replayed nor run. A key with no store configured is a 503: a client relying on the
// key must not get a second run silently. An error is a refusal of the key itself, before
// the call, or of its stored outcome.
func (k *Keys) Invoke(ctx context.Context, ec identity.ExecContext, req gateway.Request, key string) (answer.Answer, error) {
	if len(key) == 0 || len(key) > MaxKey || !printable(key) {
		return answer.Answer{}, fault.New(fault.Invalid, CodeInvalidKey, "an idempotency key is 1 to %d printable ASCII characters", MaxKey)
	}
	if k.Store == nil {
		return answer.Answer{}, fault.New(fault.Unavailable, fault.CodeStoreUnavailable,
			"idempotency keys are not available on this gateway; the call was not run")
	}
	now := time.Now()
	rec := store.IdempotencyRecord{Org: ec.Org, Subject: ec.Subject.Ref, Key: key, InputHash: scopeHash(ec, req),
		CreatedAt: now, ExpiresAt: now.Add(TTL)}
	stored, claimed, err := k.Store.ClaimIdempotency(ctx, rec)
	if err != nil {
		k.Outages.Failed(outage.IdempotencyStore, err)
		return answer.Answer{}, gateway.Unavailable(fault.CodeStoreUnavailable, outage.IdempotencyStore)
	}
	k.Outages.OK(outage.IdempotencyStore)
	if !claimed {
		switch {
		case stored.InputHash != rec.InputHash:
			return answer.Answer{}, fault.New(fault.Unprocessable, CodeKeyReused,
				"this Idempotency-Key was used for another call (other ref, input or token context); use a new key")
		case stored.State != store.IdempotencyDone:
			e := fault.New(fault.Conflict, CodeKeyInUse, "the call made with this Idempotency-Key at %s is running, or ran "+
				"without its answer being stored; it is not run again", stored.CreatedAt.UTC().Format(time.RFC3339))
			e.AuditID = stored.AuditID
			return answer.Answer{}, e
		}
		first, err := storedAnswer(stored)
		if err != nil {
			return answer.Answer{}, err
		}
		if res, err := k.Funnel.Replay(ctx, ec, req, stored.AuditID); res != nil || err != nil {
			ans, _ := answer.Of(res, err) // refused now: the refusal, never the stored answer
			return ans, nil
		}
		return first, nil
	}
	res, err := k.Funnel.Invoke(ctx, ec, req)
	ans, _ := answer.Of(res, err)
	done := context.WithoutCancel(ctx)
	if released(res, err) {
		_ = k.Store.ReleaseIdempotency(done, ec.Org, ec.Subject.Ref, key) // a failed release leaves the key in use: safe
		return ans, nil
	}
	r := resultOf(res, err)
	kept, _ := json.Marshal(r) // every domain value encodes, as in answer.Of
	// Status and Body, the answer as sent, are what previous-release replicas replay: written
	// for one more release (expand/contract).
	c := store.IdempotencyCompletion{Org: ec.Org, Subject: ec.Subject.Ref, Key: key, Result: kept, AuditID: r.auditID(),
		Status: ans.Status, Body: ans.Body}
	if err := k.Store.CompleteIdempotency(done, c); err != nil && !errors.Is(err, store.ErrConflict) {
		k.Spool.Add(spool.Entry{Idempotency: &c})
	}
	return ans, nil
}

// released says the key of a call is given back rather than its outcome kept: the call did
// not run, as the funnel says (a limit's denial, or an error it marked NotRun), and its
// refusal is one a retry may get past (a dependency unavailable, a limit). Anything else
// is kept, and an error not marked is taken to have run: a retry must never run a call twice.
// A policy's denial and a held call did not run either, but they are the call's answer.
func released(res *gateway.Result, err error) bool {
	if err != nil {
		var fe *fault.Error
		return errors.As(err, &fe) && fe.NotRun && (fe.Kind == fault.Unavailable || fe.Kind == fault.RateLimited)
	}
	return res.Denial != nil && res.Denial.Limited
}

// storedAnswer is the answer of a done key, made of its stored result by answer.Of as the
// first call's was. A key a previous release completed has no result: its answer as sent
// is the answer. A result that does not decode is a typed 500, never a guess.
func storedAnswer(rec store.IdempotencyRecord) (answer.Answer, error) {
	if len(rec.Result) == 0 {
		return answer.Answer{Status: rec.Status, Body: rec.Body, Replayed: true}, nil
	}
	r, err := parseResult(rec.Result)
	if err != nil {
		slog.Error("idempotency: a stored result does not decode; answering an error", "auditId", rec.AuditID, "err", err)
		e := fault.Wrap(err, fault.Internal, CodeResultUnreadable, "the outcome of the call made with this Idempotency-Key at %s "+
			"cannot be read; it is not run again", rec.CreatedAt.UTC().Format(time.RFC3339))
		e.AuditID = rec.AuditID
		return answer.Answer{}, e
	}
	ans, _ := answer.Of(r.outcome())
	ans.Replayed, ans.RetryAfter = true, 0 // a Retry-After was the first call's moment, not the replay's
	return ans, nil
}

// scopeHash identifies what a call asked and in which decision context: its ref, its input
// (whitespace aside), and every verified claim the policy decides on beyond org and subject
// (the store's key). Sets are sorted: the same claims in another order are the same context.
func scopeHash(ec identity.ExecContext, req gateway.Request) string {
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
		// Delegation is the person a delegated call acts for: an agent's key reused for
		// another person is another call, never a replay of the first person's answer.
		// Absent for other calls, whose hash is unchanged.
		Delegation *identity.Delegation `json:"delegation,omitempty"`
	}{ec.Subject.Kind, ec.OrgRole, ec.Environment, ec.Project, ec.Session, sorted(ec.Armed), sorted(ec.Groups), sorted(ec.Roles), ec.Delegation}
	h := sha256.New()
	h.Write([]byte(req.Ref))
	h.Write([]byte{0})
	h.Write(in.Bytes())
	h.Write([]byte{0})
	raw, _ := json.Marshal(scope) // strings and string slices encode
	h.Write(raw)
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
