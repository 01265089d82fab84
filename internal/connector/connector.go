// Package connector holds what every provider connector shares: the Provider description a
// binding is checked against, the Target a connector calls (base URL, bound configuration,
// the opened credential), a JSON-over-HTTP client that maps provider failures to typed
// run errors without ever echoing the credential, and the runner that serves a capability
// call through a binding. Providers live in sub-packages by family: scm, tracker, chat.
package connector

import (
	"context"
	"encoding/json"
	"net/http"
	"sort"

	"github.com/xemahq/xema/internal/credential"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/inputschema"
	"github.com/xemahq/xema/internal/kernel"
)

// Error codes connectors answer with (fault.Error.Code).
const (
	CodeCredentialRejected  = "CREDENTIAL_REJECTED"
	CodeCredentialForbidden = "CREDENTIAL_FORBIDDEN"
	CodeRateLimited         = "PROVIDER_RATE_LIMITED"
	CodeBranchNotFound      = "BRANCH_NOT_FOUND"
	CodeChangeRequestExists = "CHANGE_REQUEST_EXISTS"
	CodeNotFound            = "CHANGE_REQUEST_NOT_FOUND"
	CodeNotMergeable        = "CHANGE_REQUEST_NOT_MERGEABLE"
	CodeRepositoryNotFound  = "REPOSITORY_NOT_FOUND"
	CodeConversationGone    = "CONVERSATION_NOT_FOUND"
	// CodeBindingInvalid: the binding serving the call names what cannot serve it (an
	// unknown provider or repository, a credential of the wrong shape).
	CodeBindingInvalid = "BINDING_INVALID"
)

// Target is what one call of a connector reaches: the binding's base URL and configuration
// and the credential opened for this call.
type Target struct {
	BaseURL string
	Config  json.RawMessage
	Token   credential.Secret
	HTTP    *http.Client
}

// Handler serves one capability ref for one provider.
type Handler func(ctx context.Context, t Target, call kernel.Call) (any, error)

// Provider is one provider's connector.
type Provider struct {
	Name string
	// Conversational providers are bound per conversation (chat): the caller's input names
	// the conversation and the binding for it decides the provider.
	Conversational bool
	// Handlers by capability ref.
	Handlers map[string]Handler
	// CheckConfig validates a binding's config object; a problem names its JSON pointer
	// under /config.
	CheckConfig func(config json.RawMessage) error
}

// Registry is the set of known providers, by name.
type Registry map[string]*Provider

// Add registers providers.
func (r Registry) Add(ps ...*Provider) Registry {
	for _, p := range ps {
		r[p.Name] = p
	}
	return r
}

// Names lists the providers, sorted.
func (r Registry) Names() []string {
	out := make([]string, 0, len(r))
	for n := range r {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Serves reports whether some provider serves ref.
func (r Registry) Serves(ref string) bool {
	for _, p := range r {
		if _, ok := p.Handlers[ref]; ok {
			return true
		}
	}
	return false
}

// Refs lists the refs a provider serves, sorted.
func (p *Provider) Refs() []string {
	out := make([]string, 0, len(p.Handlers))
	for ref := range p.Handlers {
		out = append(out, ref)
	}
	sort.Strings(out)
	return out
}

// InvalidInput is a 400 naming the input field a connector could not use.
func InvalidInput(path, problem string) error {
	return &fault.Error{Kind: fault.Invalid, Code: "INVALID_INPUT", Message: path + " " + problem,
		Violations: []inputschema.Violation{{Path: path, Message: problem}}}
}
