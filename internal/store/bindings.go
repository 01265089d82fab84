package store

import (
	"context"
	"encoding/json"
	"time"
)

// Credential is a brokered provider credential as stored: only its sealed form (see
// internal/secretbox) and metadata. The plaintext never reaches the store.
type Credential struct {
	ID        string
	Org       string
	Name      string
	Provider  string
	Sealed    string // secretbox sealed value
	KeyID     string // id of the key Sealed is sealed under
	CreatedBy string
	CreatedAt time.Time
	// RotatedAt is when Sealed was last sealed under another key (zero: never).
	RotatedAt time.Time
	// OAuth is, for an OAuth credential, its authorization server and client as
	// internal/connection encodes them (Sealed is then the client secret, and the tokens are
	// the connections'); nil for a static credential (Sealed is the provider's token).
	OAuth json.RawMessage
}

// Binding is an org-level provider binding: the provider, base URL and credential that
// serve the refs matching RefPattern for callers in Org (and Project, Environment when set).
// Chat bindings name a Conversation: one binding per conversation.
type Binding struct {
	ID           string
	Org          string
	Project      string // "" = every project of the org
	Environment  string // "" = every environment
	RefPattern   string // a ref glob, e.g. "connector:scm.*"
	Conversation string // chat only: the conversation this binding serves
	Provider     string
	BaseURL      string
	CredentialID string
	Config       json.RawMessage // provider settings, e.g. {"repository": "owner/name"}
	CreatedBy    string
	CreatedAt    time.Time
}

// BindingStore holds credentials and bindings. It is part of Store.
type BindingStore interface {
	// PutCredential stores a new credential: a stored ID is ErrConflict.
	PutCredential(ctx context.Context, c Credential) error
	GetCredential(ctx context.Context, id string) (Credential, error)
	// ListCredentials returns the credentials of org ("" = all), oldest first.
	ListCredentials(ctx context.Context, org string) ([]Credential, error)
	// DeleteCredential removes a credential: ErrNotFound when unknown, ErrConflict while a
	// binding or (an OAuth credential's) connection uses it.
	DeleteCredential(ctx context.Context, id string) error
	// ResealCredentials replaces every credential's sealed value with reseal's result in one
	// transaction (key rotation): either all are resealed or none is.
	// A credential whose key id changes has RotatedAt set to at.
	ResealCredentials(ctx context.Context, at time.Time, reseal func(Credential) (sealed, keyID string, err error)) (int, error)

	// PutBinding stores a new binding: a stored ID, or another binding with the same org,
	// project, environment, ref pattern and conversation, is ErrConflict; an unknown
	// credential is ErrNotFound. A non-empty replaces is the id of a binding of b's org that
	// b takes the place of in the same transaction (a change: the old one is gone only if b
	// is stored); unknown, or another org's, is ErrNotFound.
	PutBinding(ctx context.Context, b Binding, replaces string) error
	GetBinding(ctx context.Context, id string) (Binding, error)
	// ListBindings returns the bindings of org ("" = all), oldest first.
	ListBindings(ctx context.Context, org string) ([]Binding, error)
	// DeleteBinding removes a binding: ErrNotFound when unknown.
	DeleteBinding(ctx context.Context, id string) error
}

// Validate checks the fields the store itself requires.
func (c Credential) Validate() error {
	if err := required("credential", field{"ID", c.ID}, field{"Org", c.Org}, field{"Provider", c.Provider},
		field{"Sealed", c.Sealed}, field{"KeyID", c.KeyID}); err != nil {
		return err
	}
	return jsonDocs("credential", false, doc{"OAuth", c.OAuth})
}

// Validate checks the fields the store itself requires.
func (b Binding) Validate() error {
	if err := required("binding", field{"ID", b.ID}, field{"Org", b.Org}, field{"RefPattern", b.RefPattern},
		field{"Provider", b.Provider}, field{"BaseURL", b.BaseURL}, field{"CredentialID", b.CredentialID}); err != nil {
		return err
	}
	return jsonDocs("binding", true, doc{"Config", b.Config})
}
