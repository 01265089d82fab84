// Package audit writes the append-only record of every decision and rebuilds the structured
// denial a caller can ask for with why-denied. Records never hold raw input, only its hash.
package audit

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/xemahq/xema/internal/store"
)

// NewID returns a fresh audit id: prefix "inv_" for allowed calls and "deny_" for denials,
// as in the spec's examples, followed by the time in milliseconds (48 bits) and 80 random
// bits, in base32hex, whose digits sort as their values do. Ids of one prefix thus sort by
// time, so the store appends each to the right edge of its id index instead of to a random
// page of it: with 400,000 records stored, a record cost 16-20 % less CPU to append
// (docs/performance-history.md), and the gap grows with the log.
func NewID(prefix string) string {
	return newID(prefix, time.Now())
}

var idEncoding = base32.HexEncoding.WithPadding(base32.NoPadding)

// RandomID is prefix and 80 random bits in lowercase base32, the format approval ids are
// published in (the schemas of approval:approve@1 and approval:reject@1).
func RandomID(prefix string) string {
	var b [10]byte
	randomBytes(b[:])
	return prefix + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

func randomBytes(b []byte) {
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("audit: crypto/rand failed: %v", err)) // the OS RNG never fails on Linux
	}
}

func newID(prefix string, now time.Time) string {
	var b [16]byte
	ms := uint64(now.UnixMilli())
	for i := range 6 {
		b[i] = byte(ms >> (8 * (5 - i)))
	}
	randomBytes(b[6:])
	return prefix + strings.ToLower(idEncoding.EncodeToString(b[:]))
}

// OutcomeID is the id of the record that closes the allowed call auditID: the decision is
// written before the run (so a crash mid-run still leaves it), the outcome after.
func OutcomeID(auditID string) string { return auditID + ".outcome" }

// InputHash is the HMAC-SHA256 of the raw input as received, under the deployment's
// input-hash key (KeyInputHash). An unkeyed hash would let anyone who reads the record
// recover a short input (a secret posted to credential:create@1) by trying candidates; with
// the key, equal inputs still hash equal within one deployment, which is what the record is
// for. The key comes from the store (app loads it at start); an empty key is for tests only.
func InputHash(key, raw []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write(raw)
	return "hmac-sha256:" + hex.EncodeToString(mac.Sum(nil))
}

// Names of the per-deployment secrets kept in the store (store.Store.DeploymentKey).
const (
	KeyInputHash = "audit-input-hash"
	KeyCursor    = "search-cursor"
)

// Record is the public view of an audit record (GET /v1/audit/{id}).
type Record struct {
	AuditID        string          `json:"auditId"`
	Time           string          `json:"time"`
	Ref            string          `json:"capability"`
	Subject        Subject         `json:"subject"`
	Environment    string          `json:"environment"`
	Decision       string          `json:"decision"`
	Reasons        json.RawMessage `json:"reasons"`
	Suggestions    json.RawMessage `json:"suggestions,omitempty"`
	Obligations    json.RawMessage `json:"obligations,omitempty"`
	BundleRevision string          `json:"policyRevision"`
	InputHash      string          `json:"inputHash,omitempty"`
	Runner         string          `json:"runner,omitempty"`
	Outcome        string          `json:"outcome"`
	LatencyMicros  int64           `json:"latencyMicros"`
	ParentID       string          `json:"parentAuditId,omitempty"`
	// Aggregate is set on the records of unauthenticated attempts, audited in aggregate
	// (gateway.UnauthAggregator).
	Aggregate *Aggregate `json:"aggregate,omitempty"`
	// OnBehalfOf is set on the records of a delegated call: Subject is then its actor.
	OnBehalfOf *OnBehalfOf `json:"onBehalfOf,omitempty"`
	// Connection is set on the records of a call served through a connection: which one
	// (never its token).
	Connection *Connection `json:"connection,omitempty"`
}

// Connection is the connection a call needed: its provider, whose account, its status when
// decided and, when there was one, its id.
type Connection struct {
	ID       string `json:"id,omitempty"`
	Provider string `json:"provider"`
	Owner    string `json:"owner"`
	Person   string `json:"person,omitempty"`
	Status   string `json:"status"`
}

// OnBehalfOf is the person a delegated call acted for and the chain of actors, the caller
// (the record's subject) first.
type OnBehalfOf struct {
	Person Subject  `json:"person"`
	Actors []string `json:"actors"`
}

// CallDetail is the detail of a call's records: the delegation (as the Execution Context's
// JSON writes it, so a record whose detail is that context reads the same) and the
// connection it went through; nil when neither.
func CallDetail(d *OnBehalfOf, c *Connection) json.RawMessage {
	if d == nil && c == nil {
		return nil
	}
	raw, _ := json.Marshal(struct {
		Delegation *OnBehalfOf `json:"delegation,omitempty"`
		Connection *Connection `json:"connection,omitempty"`
	}{d, c})
	return raw
}

// DelegationOf is the delegation a record's detail names, or nil.
func DelegationOf(r store.AuditRecord) *OnBehalfOf {
	if len(r.Detail) == 0 {
		return nil
	}
	var d struct {
		Delegation *OnBehalfOf `json:"delegation"`
	}
	if json.Unmarshal(r.Detail, &d) != nil || d.Delegation == nil || d.Delegation.Person.Ref == "" {
		return nil
	}
	return d.Delegation
}

// ConnectionOf is the connection a record's detail names, or nil.
func ConnectionOf(r store.AuditRecord) *Connection {
	if len(r.Detail) == 0 {
		return nil
	}
	var d struct {
		Connection *Connection `json:"connection"`
	}
	if json.Unmarshal(r.Detail, &d) != nil || d.Connection == nil || d.Connection.Provider == "" {
		return nil
	}
	return d.Connection
}

// Aggregate describes an aggregate record: the unauthenticated attempts of one (route,
// reason, source) in one interval.
type Aggregate struct {
	Route  string `json:"route"`
	Reason string `json:"reason"`
	Source string `json:"source"`
	// Count is the attempts this row accounts for: 1 in the opening record, the rest of the
	// bucket in its closing record. Summed over the rows, the counts are the attempts.
	Count int64 `json:"count"`
	// Total is the bucket's attempts: known once the closing record is written (GET
	// /v1/audit/{id} of the opening record reports it then).
	Total int64  `json:"total,omitempty"`
	From  string `json:"from"`
	Until string `json:"until,omitempty"`
}

// AggregateCountID is the id of the closing record of the aggregate whose opening record is id.
func AggregateCountID(id string) string { return id + ".count" }

// AggregateOf returns the aggregate a record's detail holds, or nil.
func AggregateOf(r store.AuditRecord) *Aggregate {
	if r.Decision != DecisionUnauthenticated || len(r.Detail) == 0 {
		return nil
	}
	var d struct {
		Aggregate *Aggregate `json:"aggregate"`
	}
	if json.Unmarshal(r.Detail, &d) != nil {
		return nil
	}
	return d.Aggregate
}

// Subject is who made the call.
type Subject struct {
	Kind string `json:"kind"`
	Ref  string `json:"ref"`
}

// Denial is the spec's structured denial.
type Denial struct {
	AuditID     string          `json:"auditId"`
	Subject     Subject         `json:"subject"`
	OnBehalfOf  *OnBehalfOf     `json:"onBehalfOf,omitempty"`
	Capability  string          `json:"capability"`
	Environment string          `json:"environment"`
	Decision    string          `json:"decision"`
	Reasons     json.RawMessage `json:"reasons"`
	Suggestions json.RawMessage `json:"suggestions"`
}

// View turns a stored record into its public shape.
func View(r store.AuditRecord) Record {
	return Record{
		AuditID: r.ID, Time: r.Time.UTC().Format("2006-01-02T15:04:05.000000Z07:00"), Ref: r.Ref,
		Subject:     Subject{Kind: r.SubjectKind, Ref: r.SubjectRef},
		Environment: r.Environment, Decision: r.Decision,
		Reasons: orEmpty(r.Reasons), Suggestions: r.Suggestions, Obligations: r.Obligations,
		BundleRevision: r.BundleRevision, InputHash: r.InputHash, Runner: r.Runner,
		Outcome: r.Outcome, LatencyMicros: r.LatencyMicros, ParentID: r.ParentID,
		Aggregate: AggregateOf(r), OnBehalfOf: DelegationOf(r), Connection: ConnectionOf(r),
	}
}

// WhyDenied rebuilds the structured denial of a denied record. ok is false when the record
// is not a denial.
func WhyDenied(r store.AuditRecord) (d Denial, ok bool) {
	if r.Decision != DecisionDenied {
		return Denial{}, false
	}
	return Denial{
		AuditID: r.ID, Subject: Subject{Kind: r.SubjectKind, Ref: r.SubjectRef}, OnBehalfOf: DelegationOf(r),
		Capability: r.Ref, Environment: r.Environment, Decision: DecisionDenied,
		Reasons: orEmpty(r.Reasons), Suggestions: orEmpty(r.Suggestions),
	}, true
}

// Decisions recorded in the log.
const (
	DecisionAllowed         = "allowed"
	DecisionDenied          = "denied"
	DecisionPendingApproval = "pending-approval"
	DecisionInvalid         = "invalid-input"
	DecisionNotFound        = "unknown-capability"
	DecisionError           = "error"
	DecisionUnauthenticated = "unauthenticated"
)

func orEmpty(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("[]")
	}
	return raw
}
