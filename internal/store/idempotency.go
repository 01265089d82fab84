package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Idempotency key states.
const (
	IdempotencyRunning = "running"
	IdempotencyDone    = "done"
)

// IdempotencyRecord is the first call a caller made with one Idempotency-Key, and its answer
// once stored.
type IdempotencyRecord struct {
	Org       string
	Subject   string
	Key       string
	InputHash string // what the call asked (ref + input); another hash under the key is a misuse
	State     string
	// Result is the first call's outcome in the domain's terms (the idempotency layer's
	// encoding, opaque here), once done; nil for a key a previous release completed.
	Result json.RawMessage
	// Status and Body are the answer as sent, once done: what previous releases replay. They
	// are still written for one more release (expand/contract), then dropped.
	Status    int
	Body      json.RawMessage
	AuditID   string
	CreatedAt time.Time
	ExpiresAt time.Time
}

// IdempotencyCompletion stores the outcome of a running key: its Result, and its answer as
// sent (Status, Body) for previous-release replicas. A completion without a Result (written
// by a previous release, or spooled by one) is stored as such.
type IdempotencyCompletion struct {
	Org     string
	Subject string
	Key     string
	Result  json.RawMessage
	Status  int
	Body    json.RawMessage
	AuditID string
}

// Validate checks what the store requires of a new key.
func (r IdempotencyRecord) Validate() error {
	if r.Org == "" || r.Subject == "" || r.Key == "" || r.InputHash == "" {
		return fmt.Errorf("%w: idempotency Org, Subject, Key and InputHash must be non-empty", ErrInvalid)
	}
	if !r.ExpiresAt.After(r.CreatedAt) {
		return fmt.Errorf("%w: idempotency ExpiresAt must be after CreatedAt", ErrInvalid)
	}
	return nil
}

// IdempotencyStore keeps idempotency keys, shared by every replica.
type IdempotencyStore interface {
	// ClaimIdempotency records r (state running) unless a record of the same org, subject
	// and key lives (ExpiresAt after r.CreatedAt): then it returns that record and
	// claimed false. An expired record is replaced. Of concurrent claimers one wins.
	ClaimIdempotency(ctx context.Context, r IdempotencyRecord) (stored IdempotencyRecord, claimed bool, err error)
	// CompleteIdempotency stores the answer of a running key: ErrNotFound when no such key,
	// ErrConflict when it is done already.
	CompleteIdempotency(ctx context.Context, c IdempotencyCompletion) error
	// ReleaseIdempotency deletes a running key whose call did not run, so a retry runs.
	ReleaseIdempotency(ctx context.Context, org, subject, key string) error
	// PruneIdempotency deletes at most limit keys expired before before.
	PruneIdempotency(ctx context.Context, before time.Time, limit int) (int64, error)
}

// HealthStore is readiness' view of the store.
type HealthStore interface {
	// ProbeWrite writes one small row for replica: it fails when the store cannot take a
	// write (down, read-only, disk full).
	ProbeWrite(ctx context.Context, replica string, at time.Time) error
}
