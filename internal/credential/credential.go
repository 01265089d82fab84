// Package credential brokers provider credentials: they are sealed at rest with
// internal/secretbox (AES-256-GCM, rotatable keyring), accepted over the API write-only, and
// opened only by a connector at the moment it calls its provider. No method returns a secret
// in a form that prints: Secret redacts itself in fmt, JSON and slog.
package credential

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/secretbox"
	"github.com/xemahq/xema/internal/store"
)

// Error codes of credential operations.
const (
	CodeInvalid           = "INVALID_CREDENTIAL"
	CodeNotFound          = "CREDENTIAL_NOT_FOUND"
	CodeInUse             = "CREDENTIAL_IN_USE"
	CodeUnavailable       = "CREDENTIAL_UNAVAILABLE"
	CodeMissingCredential = "MISSING_CREDENTIAL"
)

// MaxSecretBytes bounds a stored secret (provider tokens are far shorter).
const MaxSecretBytes = 4096

// Secret is a plaintext credential. It prints, marshals and logs as "[redacted]"; only
// Reveal gives the value, for the provider's header.
type Secret struct{ v string }

// Reveal returns the plaintext.
func (s Secret) Reveal() string { return s.v }

// String redacts.
func (Secret) String() string { return "[redacted]" }

// GoString redacts.
func (Secret) GoString() string { return "[redacted]" }

// MarshalJSON redacts.
func (Secret) MarshalJSON() ([]byte, error) { return []byte(`"[redacted]"`), nil }

// LogValue redacts.
func (Secret) LogValue() slog.Value { return slog.StringValue("[redacted]") }

// Metadata is everything about a credential that may be shown: never the secret.
type Metadata struct {
	ID        string `json:"id"`
	Org       string `json:"org"`
	Name      string `json:"name"`
	Provider  string `json:"provider"`
	KeyID     string `json:"keyId"`
	CreatedBy string `json:"createdBy"`
	CreatedAt string `json:"createdAt"`
	// RotatedAt is when the secret was last sealed under a new key (xema credential
	// rotate-key); absent when never.
	RotatedAt string `json:"rotatedAt,omitempty"`
	// Kind is "static" (the secret is the provider's token) or "oauth" (the secret is an
	// OAuth client's; each call uses a connection's token, the org's or the person's).
	Kind string `json:"kind"`
	// OAuth is an OAuth credential's authorization server and client (no secret).
	OAuth json.RawMessage `json:"oauth,omitempty"`
}

func metadataOf(c store.Credential) Metadata {
	m := Metadata{ID: c.ID, Org: c.Org, Name: c.Name, Provider: c.Provider, KeyID: c.KeyID,
		CreatedBy: c.CreatedBy, CreatedAt: c.CreatedAt.Format(time.RFC3339), Kind: "static", OAuth: c.OAuth}
	if len(c.OAuth) > 0 {
		m.Kind = "oauth"
	}
	if !c.RotatedAt.IsZero() {
		m.RotatedAt = c.RotatedAt.Format(time.RFC3339)
	}
	return m
}

// Vault seals, stores and opens credentials.
type Vault struct {
	Store store.BindingStore
	Keys  *Keys
}

// New is one credential to store.
type New struct {
	Org      string
	Name     string
	Provider string
	Secret   Secret
	// OAuth makes it an OAuth credential (internal/connection's client description, no
	// secret in it): Secret is then the client secret, and the tokens are connections'.
	OAuth json.RawMessage
}

// NewSecret wraps a plaintext received from an admin.
func NewSecret(plaintext string) Secret { return Secret{v: plaintext} }

var namePattern = regexp.MustCompile(`^[A-Za-z0-9 ._-]{0,100}$`)

// Create seals and stores a credential and returns its metadata.
func (v *Vault) Create(ctx context.Context, in New, createdBy string) (Metadata, error) {
	switch {
	case in.Secret.v == "":
		return Metadata{}, invalid("/secret", "is required")
	case len(in.Secret.v) > MaxSecretBytes:
		return Metadata{}, invalid("/secret", fmt.Sprintf("is longer than %d bytes", MaxSecretBytes))
	case !namePattern.MatchString(in.Name):
		return Metadata{}, invalid("/name", "must be at most 100 letters, digits, spaces, '.', '_' or '-'")
	}
	kr, err := v.Keys.Current()
	if err != nil {
		return Metadata{}, unavailable(err)
	}
	id := newID()
	sealed, err := kr.Seal([]byte(in.Secret.v), aad(store.Credential{ID: id, OAuth: in.OAuth}))
	if err != nil {
		return Metadata{}, unavailable(err)
	}
	c := store.Credential{ID: id, Org: in.Org, Name: in.Name, Provider: in.Provider, Sealed: sealed,
		KeyID: kr.KeyID(), CreatedBy: createdBy, CreatedAt: time.Now().UTC(), OAuth: in.OAuth}
	if err := v.Store.PutCredential(ctx, c); err != nil {
		return Metadata{}, fmt.Errorf("store credential %s: %w", id, err)
	}
	return metadataOf(store.Credential{ID: id, Org: c.Org, Name: c.Name, Provider: c.Provider, KeyID: c.KeyID,
		CreatedBy: c.CreatedBy, CreatedAt: store.Stamp(c.CreatedAt), OAuth: c.OAuth}), nil
}

// Get returns a credential's metadata; ErrNotFound-wrapping typed error when unknown.
func (v *Vault) Get(ctx context.Context, id string) (Metadata, error) {
	c, err := v.Store.GetCredential(ctx, id)
	if err != nil {
		return Metadata{}, lookupError(id, err)
	}
	return metadataOf(c), nil
}

// List returns the metadata of org's credentials.
func (v *Vault) List(ctx context.Context, org string) ([]Metadata, error) {
	cs, err := v.Store.ListCredentials(ctx, org)
	if err != nil {
		return nil, fmt.Errorf("list credentials: %w", err)
	}
	out := make([]Metadata, 0, len(cs))
	for _, c := range cs {
		out = append(out, metadataOf(c))
	}
	return out, nil
}

// Delete removes an unused credential.
func (v *Vault) Delete(ctx context.Context, id string) error {
	err := v.Store.DeleteCredential(ctx, id)
	if errors.Is(err, store.ErrConflict) {
		return fault.New(fault.Conflict, CodeInUse, "credential %s is used by a binding, or its connections are still connected: delete the binding, or disconnect them, first", id)
	}
	if err != nil {
		return lookupError(id, err)
	}
	return nil
}

// Open returns the plaintext of credential id, for a connector's outbound call.
func (v *Vault) Open(ctx context.Context, id string) (Secret, error) {
	c, err := v.Store.GetCredential(ctx, id)
	if err != nil {
		return Secret{}, lookupError(id, err)
	}
	kr, err := v.Keys.Current()
	if err != nil {
		return Secret{}, unavailable(err)
	}
	return Unseal(kr, c)
}

// Unseal opens c's sealed secret with kr (an OAuth credential's client secret, for
// internal/connection, which reads the credential itself).
func Unseal(kr *secretbox.Keyring, c store.Credential) (Secret, error) {
	pt, err := kr.Open(c.Sealed, aad(c))
	if err != nil {
		return Secret{}, unavailable(err)
	}
	return Secret{v: string(pt)}, nil
}

// Resealer reseals, at key rotation, one kind of value other than credentials sealed with the
// credential keyring (connections' tokens, servers' client secrets): it opens each with kr
// and seals it again under kr's newest key, all or none, and says how many it resealed.
type Resealer struct {
	// Kind names what it reseals, as counted: "connection(s)".
	Kind   string
	Reseal func(ctx context.Context, kr *secretbox.Keyring) (int, error)
}

// Resealed is how many values of one kind a rotation resealed.
type Resealed struct {
	Kind string
	N    int
}

// Rotation is what Rotate did: the new key, and the count of each kind resealed under it,
// the credentials first.
type Rotation struct {
	KeyID    string
	Resealed []Resealed
}

// Rotate puts a new key first in the keyring file (keeping the old ones so values sealed
// under them still open), reseals every credential under it in one transaction, then each
// kind of more in a transaction of its own, and, when prune is set and every kind was
// resealed, drops the old keys. With a keyring from XEMA_SECRET_KEY the operator lists the
// new key first there; Rotate then only reseals. A kind that fails is left as it was (and
// the kinds before it stay resealed under the new key): the old keys are kept, whatever
// prune says, and running Rotate again finishes the rotation.
func (v *Vault) Rotate(ctx context.Context, prune bool, more ...Resealer) (Rotation, error) {
	if v.Keys.path != "" {
		if err := v.Keys.prependKey(); err != nil {
			return Rotation{}, err
		}
	}
	kr, err := v.Keys.Current()
	if err != nil {
		return Rotation{}, err
	}
	all := append([]Resealer{{Kind: "credential(s)", Reseal: func(ctx context.Context, kr *secretbox.Keyring) (int, error) {
		return v.Store.ResealCredentials(ctx, time.Now(), func(c store.Credential) (string, string, error) {
			pt, err := kr.Open(c.Sealed, aad(c))
			if err != nil {
				return "", "", err
			}
			sealed, err := kr.Seal(pt, aad(c))
			return sealed, kr.KeyID(), err
		})
	}}}, more...)
	rot := Rotation{KeyID: kr.KeyID()}
	for _, r := range all {
		n, err := r.Reseal(ctx, kr)
		if err != nil {
			return rot, fmt.Errorf("rotate: %s: %w (%s; the old keys are kept)", r.Kind, err, rot.done())
		}
		rot.Resealed = append(rot.Resealed, Resealed{Kind: r.Kind, N: n})
	}
	if prune && v.Keys.path != "" {
		if err := v.Keys.keepNewest(); err != nil {
			return rot, err
		}
	}
	return rot, nil
}

// String is what a rotation resealed: "3 credential(s), 2 connection(s)".
func (r Rotation) String() string {
	parts := make([]string, 0, len(r.Resealed))
	for _, x := range r.Resealed {
		parts = append(parts, fmt.Sprintf("%d %s", x.N, x.Kind))
	}
	return strings.Join(parts, ", ")
}

// done says what a failed rotation had resealed before failing.
func (r Rotation) done() string {
	if len(r.Resealed) == 0 {
		return "nothing was resealed"
	}
	return "resealed under key " + r.KeyID + " before the failure: " + r.String()
}

// aad binds a sealed value to its credential: a sealed value copied onto another credential
// does not open. An OAuth credential's client secret is bound to its OAuth description too,
// under another purpose: a replica of a release before OAuth credentials, which would send
// the secret to the provider as a token, cannot open it (it fails closed), and a description
// changed in the database no longer opens it.
func aad(c store.Credential) []byte {
	if len(c.OAuth) == 0 {
		return []byte("credential:" + c.ID)
	}
	sum := sha256.Sum256(c.OAuth)
	return []byte("credential/oauth-client:" + c.ID + "\x00" + hex.EncodeToString(sum[:]))
}

func newID() string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return "cred_" + hex.EncodeToString(b[:])
}

func invalid(path, problem string) error {
	return fault.New(fault.Invalid, CodeInvalid, "%s %s", path, problem)
}

func lookupError(id string, err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return fault.New(fault.NotFound, CodeNotFound, "no credential %q", id)
	}
	return fmt.Errorf("credential %s: %w", id, err)
}

// unavailable hides the keyring's details from callers (they are logged for operators; they
// never hold a secret).
func unavailable(err error) error {
	slog.Error("credential keyring unavailable", "err", err)
	return fault.New(fault.Unavailable, CodeUnavailable, "the credential keyring is unavailable; the call was not made (fail closed)")
}
