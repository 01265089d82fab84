// Package binding holds org-level provider bindings and the resolver that serves a
// capability call through them: for the caller's org, project and environment it picks the
// most specific binding whose ref pattern matches, opens the bound credential and runs the
// provider's connector. Callers never name a provider, a repository or a credential.
package binding

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/xemahq/xema/internal/connection"
	"github.com/xemahq/xema/internal/connector"
	"github.com/xemahq/xema/internal/credential"
	"github.com/xemahq/xema/internal/egress"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/grant"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/inputschema"
	"github.com/xemahq/xema/internal/store"
)

// Error codes of binding management and resolution.
const (
	CodeInvalid             = "INVALID_BINDING"
	CodeNotFound            = "BINDING_NOT_FOUND"
	CodeExists              = "BINDING_EXISTS"
	CodeMissingBinding      = "MISSING_BINDING"
	CodeUnknownConversation = "UNKNOWN_CONVERSATION"
)

// OrgOf is the org bindings and credentials are kept under for ec.
func OrgOf(ec identity.ExecContext) string {
	if ec.Org == "" {
		return identity.DefaultOrg
	}
	return ec.Org
}

// Spec is the input of binding:create@1.
type Spec struct {
	Project      string          `json:"project"`
	Environment  string          `json:"environment"`
	RefPattern   string          `json:"refPattern"`
	Conversation string          `json:"conversation"`
	Provider     string          `json:"provider"`
	BaseURL      string          `json:"baseUrl"`
	CredentialID string          `json:"credentialId"`
	Config       json.RawMessage `json:"config"`
	// Replaces is the id of a binding of the org this one takes the place of, in one
	// transaction: a change that never leaves the refs unbound in between.
	Replaces string `json:"replaces,omitempty"`
}

// View is a binding as answered: no secret, only the credential's id.
type View struct {
	ID           string          `json:"id"`
	Org          string          `json:"org"`
	Project      string          `json:"project,omitempty"`
	Environment  string          `json:"environment,omitempty"`
	RefPattern   string          `json:"refPattern"`
	Conversation string          `json:"conversation,omitempty"`
	Provider     string          `json:"provider"`
	BaseURL      string          `json:"baseUrl"`
	CredentialID string          `json:"credentialId"`
	Config       json.RawMessage `json:"config"`
	CreatedBy    string          `json:"createdBy"`
	CreatedAt    string          `json:"createdAt"`
}

func viewOf(b store.Binding) View {
	return View{ID: b.ID, Org: b.Org, Project: b.Project, Environment: b.Environment, RefPattern: b.RefPattern,
		Conversation: b.Conversation, Provider: b.Provider, BaseURL: b.BaseURL, CredentialID: b.CredentialID,
		Config: b.Config, CreatedBy: b.CreatedBy, CreatedAt: b.CreatedAt.Format(time.RFC3339)}
}

// Service manages bindings and resolves calls through them.
type Service struct {
	Store     store.BindingStore
	Vault     *credential.Vault
	Providers connector.Registry
	HTTP      *http.Client
	// Egress checks a base URL at create: a refused literal address, or plain http to
	// anything but an allowed loopback address (the URL receives the credential), is a 400.
	// nil checks nothing more than the URL's form.
	Egress *egress.Policy
	// Connections hands out the tokens of OAuth credentials' connections (the org's or the
	// calling person's) and their status; nil refuses every call through an OAuth credential.
	Connections Connections
	// ConnectURL is the console page where an owner connects (a denial's suggestion).
	ConnectURL string
}

// Connections is what bindings need of the connections (connection.Service).
type Connections interface {
	Look(ctx context.Context, org, providerID string, owner connection.Owner) (*connection.Read, error)
	TokenFor(ctx context.Context, org, providerID string, owner connection.Owner, read *connection.Read) (credential.Secret, connection.View, error)
}

var (
	refGlob     = regexp.MustCompile(`^[a-z*][a-z0-9*?-]*:[a-z0-9*?.-]*(@(\*|[0-9]+))?$`)
	scopeName   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,99}$`)
	convPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:#@-]{0,199}$`)
)

// Create checks spec field by field and stores the binding. Every problem is a 400 naming
// its field; nothing is stored unless all hold.
func (s *Service) Create(ctx context.Context, ec identity.ExecContext, spec Spec) (View, error) {
	org := OrgOf(ec)
	var problems []inputschema.Violation
	bad := func(path, msg string) { problems = append(problems, inputschema.Violation{Path: path, Message: msg}) }

	p, known := s.Providers[spec.Provider]
	if !known {
		bad("/provider", fmt.Sprintf("unknown provider %q (known: %s)", spec.Provider, strings.Join(s.Providers.Names(), ", ")))
	}
	if spec.Project != "" && !scopeName.MatchString(spec.Project) {
		bad("/project", "must be a project name of at most 100 letters, digits, '.', '_', ':' or '-'")
	}
	// A binding may be limited to one of the spec's environment kinds (grant.Kinds).
	if spec.Environment != "" && !slices.Contains(grant.Kinds, spec.Environment) {
		bad("/environment", fmt.Sprintf("unknown environment %q", spec.Environment))
	}
	if !refGlob.MatchString(spec.RefPattern) || len(spec.RefPattern) > 200 {
		bad("/refPattern", "must be a ref glob such as \"connector:scm.*\"")
	} else if known && len(servedBy(p, spec.RefPattern)) == 0 {
		bad("/refPattern", fmt.Sprintf("matches no capability %s serves (it serves %s)", p.Name, strings.Join(p.Refs(), ", ")))
	}
	if msg := checkBaseURL(spec.BaseURL); msg != "" {
		bad("/baseUrl", msg)
	} else if s.Egress != nil {
		if msg := s.Egress.CheckURL(spec.BaseURL, true); msg != "" {
			bad("/baseUrl", msg)
		}
	}
	if known {
		switch {
		case p.Conversational && !convPattern.MatchString(spec.Conversation):
			bad("/conversation", "is required for a chat provider: the conversation this binding serves")
		case !p.Conversational && spec.Conversation != "":
			bad("/conversation", fmt.Sprintf("only chat bindings name a conversation; %s is not a chat provider", p.Name))
		}
		if len(spec.Config) == 0 {
			spec.Config = json.RawMessage(`{}`)
		}
		if err := p.CheckConfig(spec.Config); err != nil {
			bad(pointerOf(err.Error()), err.Error())
		}
	}
	if spec.CredentialID == "" {
		bad("/credentialId", "is required")
	} else {
		meta, err := s.Vault.Get(ctx, spec.CredentialID)
		var re *fault.Error
		switch {
		case errors.As(err, &re) && re.Code == credential.CodeNotFound, err == nil && meta.Org != org:
			// Another org's credential answers like an unknown one: ids are not probes.
			bad("/credentialId", fmt.Sprintf("no credential %q in org %s", spec.CredentialID, org))
		case err != nil:
			return View{}, err
		case known && meta.Provider != p.Name:
			bad("/credentialId", fmt.Sprintf("credential %s is for %s, not %s", spec.CredentialID, meta.Provider, p.Name))
		}
	}
	if spec.Replaces != "" {
		old, err := s.Store.GetBinding(ctx, spec.Replaces)
		switch {
		case errors.Is(err, store.ErrNotFound), err == nil && old.Org != org:
			bad("/replaces", fmt.Sprintf("no binding %q in org %s", spec.Replaces, org))
		case err != nil:
			return View{}, err
		}
	}
	if len(problems) > 0 {
		return View{}, &fault.Error{Kind: fault.Invalid, Code: CodeInvalid, Violations: problems,
			Message: fmt.Sprintf("the binding cannot be stored (%d problem(s)): %s %s", len(problems), problems[0].Path, problems[0].Message)}
	}
	b := store.Binding{ID: newID(), Org: org, Project: spec.Project, Environment: spec.Environment, RefPattern: spec.RefPattern,
		Conversation: spec.Conversation, Provider: spec.Provider, BaseURL: strings.TrimRight(spec.BaseURL, "/"),
		CredentialID: spec.CredentialID, Config: spec.Config, CreatedBy: ec.Subject.Ref, CreatedAt: store.Stamp(time.Time{})}
	if err := s.Store.PutBinding(ctx, b, spec.Replaces); err != nil {
		if spec.Replaces != "" && errors.Is(err, store.ErrNotFound) { // removed since it was read
			return View{}, fault.New(fault.NotFound, CodeNotFound, "no binding %q in org %s", spec.Replaces, org)
		}
		if errors.Is(err, store.ErrConflict) {
			return View{}, fault.New(fault.Conflict, CodeExists,
				"a binding for the same org, project, environment, ref pattern and conversation exists; delete it first")
		}
		return View{}, fmt.Errorf("store binding: %w", err)
	}
	return viewOf(b), nil
}

// pointerOf takes the JSON pointer a provider's config problem starts with.
func pointerOf(msg string) string {
	if p, _, ok := strings.Cut(msg, " "); ok && strings.HasPrefix(p, "/config") {
		return p
	}
	return "/config"
}

// checkBaseURL accepts an absolute http(s) URL without credentials, query or fragment:
// a credential never travels in a base URL.
func checkBaseURL(raw string) string {
	u, err := url.Parse(raw)
	switch {
	case raw == "" || len(raw) > 500:
		return "is required (an http or https URL of at most 500 characters)"
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return "must be an absolute http or https URL"
	case u.User != nil:
		return "must not hold credentials: bind a credential instead"
	case u.RawQuery != "" || u.Fragment != "":
		return "must not have a query or fragment"
	}
	return ""
}

// List answers the caller's org's bindings.
func (s *Service) List(ctx context.Context, ec identity.ExecContext) ([]View, error) {
	bs, err := s.Store.ListBindings(ctx, OrgOf(ec))
	if err != nil {
		return nil, fmt.Errorf("list bindings: %w", err)
	}
	out := make([]View, 0, len(bs))
	for _, b := range bs {
		out = append(out, viewOf(b))
	}
	return out, nil
}

// Delete removes one of the caller's org's bindings.
func (s *Service) Delete(ctx context.Context, ec identity.ExecContext, id string) error {
	b, err := s.Store.GetBinding(ctx, id)
	if errors.Is(err, store.ErrNotFound) || err == nil && b.Org != OrgOf(ec) {
		return fault.New(fault.NotFound, CodeNotFound, "no binding %q", id)
	}
	if err != nil {
		return fmt.Errorf("delete binding %s: %w", id, err)
	}
	if err := s.Store.DeleteBinding(ctx, id); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return fault.New(fault.NotFound, CodeNotFound, "no binding %q", id)
		}
		return fmt.Errorf("delete binding %s: %w", id, err)
	}
	return nil
}

// servedBy lists the refs of p that pattern matches.
func servedBy(p *connector.Provider, pattern string) []string {
	var out []string
	for _, ref := range p.Refs() {
		if ok, _ := path.Match(pattern, ref); ok {
			out = append(out, ref)
		}
	}
	return out
}

// Select returns the most specific of bs serving ref for ec in conversation ("" for
// non-chat refs): a project binding beats an org-wide one, an environment-specific one an
// any-environment one, then the longer (more literal) ref pattern; ties go to the oldest.
func Select(bs []store.Binding, ec identity.ExecContext, ref, conversation string) (store.Binding, bool) {
	var cands []store.Binding
	for _, b := range bs {
		if b.Org != OrgOf(ec) || b.Conversation != conversation ||
			(b.Project != "" && b.Project != ec.Project) || (b.Environment != "" && b.Environment != ec.Environment) {
			continue
		}
		if ok, _ := path.Match(b.RefPattern, ref); ok {
			cands = append(cands, b)
		}
	}
	if len(cands) == 0 {
		return store.Binding{}, false
	}
	sort.SliceStable(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if sa, sb := specificity(a), specificity(b); sa != sb {
			return sa > sb
		}
		return len(strings.Trim(a.RefPattern, "*?")) > len(strings.Trim(b.RefPattern, "*?"))
	})
	return cands[0], true
}

func specificity(b store.Binding) int {
	n := 0
	if b.Project != "" {
		n += 2
	}
	if b.Environment != "" {
		n++
	}
	return n
}

func newID() string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return "bnd_" + hex.EncodeToString(b[:])
}

// checkURL is why the egress policy refuses u, which receives a credential ("" when it may).
func (s *Service) checkURL(u string) string {
	if s.Egress == nil {
		return ""
	}
	return s.Egress.CheckURL(u, true)
}
