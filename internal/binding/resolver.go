package binding

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/xemahq/xema/internal/catalog"
	"github.com/xemahq/xema/internal/connection"
	"github.com/xemahq/xema/internal/connector"
	"github.com/xemahq/xema/internal/connector/chat"
	"github.com/xemahq/xema/internal/credential"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/gateway"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/kernel"
	"github.com/xemahq/xema/internal/policy"
	"github.com/xemahq/xema/internal/runner"
	"github.com/xemahq/xema/internal/store"
)

var _ gateway.Resolver = (*Service)(nil)

// Serves reports whether a provider connector serves ref: such a ref is reachable through an
// org-level provider binding (catalog.Publisher.HasBinding), and its call fails with
// MISSING_BINDING until an admin binds it.
func (s *Service) Serves(ref string) bool { return s.Providers.Serves(ref) }

// Resolve implements gateway.Resolver. For a chat ref it checks that the caller's org has a
// binding for the ref at all; the conversation's binding is chosen at run time from the
// input. For other refs it picks the binding now and checks its credential exists.
func (s *Service) Resolve(ctx context.Context, ec identity.ExecContext, entry *catalog.Entry) (runner.Runner, bool, error) {
	ref := entry.Ref()
	if !s.Serves(ref) {
		return nil, false, nil
	}
	d, ok := runner.Decided(ctx).(*decided)
	if !ok || d.ref != ref || d.org != OrgOf(ec) || d.project != ec.Project || d.environment != ec.Environment {
		var err error
		if d, err = s.read(ctx, ec, ref); err != nil {
			return nil, false, err
		}
	}
	if s.conversational(ref) {
		if !anyConversation(d.bindings, ec, ref) {
			return nil, false, missingBinding(ec, ref)
		}
		return &Runner{svc: s, bindings: d.bindings, ref: ref}, true, nil
	}
	switch {
	case d.chosen == nil:
		return nil, false, missingBinding(ec, ref)
	case d.cred == nil:
		b := d.chosen
		return nil, false, fault.New(fault.Provider, credential.CodeMissingCredential, "binding %s of %s names credential %s, which does not exist; an admin must store it", b.ID, ref, b.CredentialID)
	}
	return &Runner{svc: s, bindings: d.bindings, ref: ref, chosen: d.chosen, cred: d.cred, conn: d.conn}, true, nil
}

// decided is what a connector call's decision read (Connection), carried to its resolve and
// run (runner.WithDecided) so that neither reads the bindings or the credential again.
type decided struct {
	// The binding chosen depends on the ref and the caller's org, project and environment:
	// a read is taken only for those it was made for.
	ref, org, project, environment string
	bindings                       []store.Binding
	chosen                         *store.Binding    // nil: no binding serves the ref for the caller (or a chat ref)
	cred                           *store.Credential // nil: the chosen binding's credential does not exist
	conn                           *connection.Read  // an OAuth credential's connection, as the decision read it
}

// read reads the org's bindings and, for a ref that is not a chat ref, the chosen binding's
// credential. A store that cannot answer is a typed 503 (fail closed).
func (s *Service) read(ctx context.Context, ec identity.ExecContext, ref string) (*decided, error) {
	d := &decided{ref: ref, org: OrgOf(ec), project: ec.Project, environment: ec.Environment}
	bs, err := s.Store.ListBindings(ctx, d.org)
	if err != nil {
		return nil, fault.New(fault.Unavailable, fault.CodeStoreUnavailable, "bindings unavailable; the call was denied (fail closed)")
	}
	d.bindings = bs
	if s.conversational(ref) {
		return d, nil
	}
	b, ok := Select(bs, ec, ref, "")
	if !ok {
		return d, nil
	}
	d.chosen = &b
	c, err := s.Store.GetCredential(ctx, b.CredentialID)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return nil, fault.New(fault.Unavailable, fault.CodeStoreUnavailable, "credentials unavailable; the call was denied (fail closed)")
	case c.Org == d.org: // another org's credential is no credential of this call's
		d.cred = &c
	}
	return d, nil
}

func (s *Service) conversational(ref string) bool {
	for _, p := range s.Providers {
		if _, ok := p.Handlers[ref]; ok && p.Conversational {
			return true
		}
	}
	return false
}

func anyConversation(bs []store.Binding, ec identity.ExecContext, ref string) bool {
	for _, b := range bs {
		if b.Conversation != "" {
			if _, ok := Select([]store.Binding{b}, ec, ref, b.Conversation); ok {
				return true
			}
		}
	}
	return false
}

func missingBinding(ec identity.ExecContext, ref string) *fault.Error {
	where := "org " + OrgOf(ec)
	if ec.Project != "" {
		where += ", project " + ec.Project
	}
	return fault.New(fault.Provider, CodeMissingBinding, "no provider binding serves %s for %s in environment %s; an org admin must create one (POST /v1/bindings)", ref, where, ec.Environment)
}

// Runner runs one call through a binding's connector.
type Runner struct {
	svc      *Service
	bindings []store.Binding
	ref      string
	chosen   *store.Binding    // nil for chat: chosen from the input's conversation
	cred     *store.Credential // the chosen binding's, as resolved; nil for chat
	conn     *connection.Read  // its connection as the decision read it; nil when none
}

// Kind is "connector".
func (*Runner) Kind() string { return "connector" }

// Run opens the bound credential and calls the provider.
func (r *Runner) Run(ctx context.Context, call kernel.Call) (json.RawMessage, error) {
	b := r.chosen
	if b == nil {
		var in struct {
			Conversation string `json:"conversation"`
		}
		_ = json.Unmarshal(call.Input, &in)
		found, ok := Select(r.bindings, call.Exec, r.ref, in.Conversation)
		if !ok || in.Conversation == "" {
			return nil, fault.New(fault.NotFound, CodeUnknownConversation,
				"no conversation %q is bound for you; an admin binds a conversation to Slack or Telegram", in.Conversation)
		}
		b = &found
	}
	p, ok := r.svc.Providers[b.Provider]
	if !ok {
		return nil, fault.New(fault.Provider, connector.CodeBindingInvalid, "binding %s names provider %q, which this gateway does not have", b.ID, b.Provider)
	}
	h, ok := p.Handlers[r.ref]
	if !ok {
		return nil, fault.New(fault.Provider, connector.CodeBindingInvalid, "binding %s: provider %s does not serve %s", b.ID, b.Provider, r.ref)
	}
	token, err := r.token(ctx, call.Exec, *b)
	if err != nil {
		var re *fault.Error
		if errors.As(err, &re) {
			re.NotRun = true // the provider was never called
		}
		return nil, err
	}
	out, err := runner.Kernel{Handler: func(ctx context.Context, call kernel.Call) (any, error) {
		return h(ctx, connector.Target{BaseURL: b.BaseURL, Config: b.Config, Token: token, HTTP: r.svc.HTTP}, call)
	}}.Run(ctx, call)
	return out, err
}

// token is b's provider's token, from the credential the call resolved (a chat call's
// binding, chosen now, has its credential read now).
func (r *Runner) token(ctx context.Context, ec identity.ExecContext, b store.Binding) (credential.Secret, error) {
	c := r.cred
	if c == nil || c.ID != b.CredentialID {
		read, err := r.svc.credential(ctx, b)
		if err != nil {
			return credential.Secret{}, err
		}
		c = &read
	}
	return r.svc.token(ctx, ec, *c, r.conn)
}

// credential reads the credential binding b names.
func (s *Service) credential(ctx context.Context, b store.Binding) (store.Credential, error) {
	c, err := s.Store.GetCredential(ctx, b.CredentialID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return store.Credential{}, fault.New(fault.Provider, credential.CodeMissingCredential, "binding %s names credential %s, which does not exist", b.ID, b.CredentialID)
	case err != nil:
		return store.Credential{}, fault.New(fault.Unavailable, fault.CodeStoreUnavailable, "credentials unavailable; the call was denied (fail closed)")
	}
	return c, nil
}

// token is what the provider receives: a static credential's secret, or the token of the
// connection an OAuth credential's call needs (the org's, or the calling person's).
func (s *Service) token(ctx context.Context, ec identity.ExecContext, c store.Credential, read *connection.Read) (credential.Secret, error) {
	if len(c.OAuth) == 0 {
		kr, err := s.Vault.Keys.Current()
		if err != nil {
			return credential.Secret{}, fault.Wrap(err, fault.Unavailable, credential.CodeUnavailable, "the credential keyring is unavailable")
		}
		return credential.Unseal(kr, c)
	}
	owner, ok, err := oauthOwner(ec, c)
	switch {
	case err != nil:
		return credential.Secret{}, err
	case !ok || s.Connections == nil:
		return credential.Secret{}, fault.New(fault.Denied, connection.CodeRequired, "this call needs a person's own connection to %s, and it has no person", c.ID)
	}
	tok, _, err := s.Connections.TokenFor(ctx, OrgOf(ec), c.ID, owner, read)
	return tok, err
}

// oauthOwner is whose connection a call of ec through OAuth credential c needs.
func oauthOwner(ec identity.ExecContext, c store.Credential) (connection.Owner, bool, error) {
	var cl connection.Client
	if err := json.Unmarshal(c.OAuth, &cl); err != nil {
		return connection.Owner{}, false, fault.Wrap(err, fault.Provider, connector.CodeBindingInvalid, "credential %s: its OAuth client cannot be read", c.ID)
	}
	owner, ok := connection.OwnerFor(ec, cl.Owner)
	return owner, ok, nil
}

// Connection implements gateway.Connections: for a ref a binding to an OAuth credential
// serves, whose connection the call needs and its status (nil for others; a chat ref's
// binding is chosen from its input at run time, where a missing connection refuses it too).
// What it read of the bindings and the credential goes to the call's resolve and run.
func (s *Service) Connection(ctx context.Context, ec identity.ExecContext, entry *catalog.Entry) (*policy.Connection, any, error) {
	ref := entry.Ref()
	if !s.Serves(ref) {
		return nil, nil, nil
	}
	d, err := s.read(ctx, ec, ref)
	if err != nil || d.cred == nil || len(d.cred.OAuth) == 0 {
		return nil, d, err
	}
	c := d.cred
	owner, ok, err := oauthOwner(ec, *c)
	if err != nil {
		return nil, nil, err
	}
	in := &policy.Connection{Provider: c.ID, Owner: owner.Kind, Status: connection.StatusMissing, ConnectURL: s.ConnectURL}
	if !ok || s.Connections == nil {
		return in, d, nil
	}
	in.Person = owner.Ref
	if d.conn, err = s.Connections.Look(ctx, OrgOf(ec), c.ID, owner); err != nil {
		return nil, nil, err
	}
	in.Status, in.ID = d.conn.Status, d.conn.ID
	return in, d, nil
}

// SendMessage sends text to an org's conversation through its connector:channel.send-message@1
// binding, as the gateway itself (notify.Sender: the approval notifications an operator
// named a conversation for). The binding and its credential are the org's own, chosen as
// for any caller of the org; an unbound conversation is UNKNOWN_CONVERSATION.
func (s *Service) SendMessage(ctx context.Context, org, conversation, text string) error {
	bs, err := s.Store.ListBindings(ctx, org)
	if err != nil {
		return fmt.Errorf("bindings of org %s: %w", org, err)
	}
	input, err := json.Marshal(map[string]string{"conversation": conversation, "text": text})
	if err != nil {
		return fmt.Errorf("encode message: %w", err)
	}
	ec := identity.ExecContext{Org: org, Subject: identity.Subject{Kind: "service", Ref: "service:xema"}}
	r := &Runner{svc: s, bindings: bs, ref: chat.RefSendMessage}
	_, err = r.Run(ctx, kernel.Call{Ref: chat.RefSendMessage, Input: input, Exec: ec})
	return err
}
