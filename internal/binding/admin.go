package binding

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"strings"

	"github.com/xemahq/xema/internal/connection"
	"github.com/xemahq/xema/internal/credential"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/inputschema"
	"github.com/xemahq/xema/internal/kernel"
)

// Refs of the admin capabilities behind /v1/bindings and /v1/credentials.
const (
	RefCreate           = "binding:create@1"
	RefList             = "binding:list@1"
	RefDelete           = "binding:delete@1"
	RefCredentialCreate = "credential:create@1"
	RefCredentialList   = "credential:list@1"
	RefCredentialDelete = "credential:delete@1"
)

//go:embed contributions/*.json
var descriptors embed.FS

// Contributions are the kernel capabilities' descriptors (contributions/*.json): the OpenAPI
// document takes their inputSchema and outputSchema as the routes' bodies.
var Contributions fs.FS = descriptors

// Deleted answers a delete.
type Deleted struct {
	ID      string `json:"id"`
	Deleted bool   `json:"deleted"`
}

// Register queues the binding and credential admin capabilities on reg. They run through
// the funnel like every capability, held by their humanBaseline (org administrators).
func Register(reg *kernel.Registry, s *Service) error {
	handlers := map[string]kernel.Handler{
		"contributions/binding-create.json": func(ctx context.Context, call kernel.Call) (any, error) {
			var spec Spec
			if err := json.Unmarshal(call.Input, &spec); err != nil {
				return nil, fmt.Errorf("decode validated input: %w", err)
			}
			return s.Create(ctx, call.Exec, spec)
		},
		"contributions/binding-list.json": func(ctx context.Context, call kernel.Call) (any, error) {
			bs, err := s.List(ctx, call.Exec)
			return map[string]any{"bindings": bs}, err
		},
		"contributions/binding-delete.json": func(ctx context.Context, call kernel.Call) (any, error) {
			id, err := idOf(call.Input)
			if err != nil {
				return nil, err
			}
			if err := s.Delete(ctx, call.Exec, id); err != nil {
				return nil, err
			}
			return Deleted{ID: id, Deleted: true}, nil
		},
		"contributions/credential-create.json": func(ctx context.Context, call kernel.Call) (any, error) {
			var in struct {
				Name     string             `json:"name"`
				Provider string             `json:"provider"`
				Secret   string             `json:"secret"`
				OAuth    *connection.Client `json:"oauth"`
			}
			if err := json.Unmarshal(call.Input, &in); err != nil {
				return nil, fmt.Errorf("decode validated input")
			}
			var oauth json.RawMessage
			if in.OAuth != nil {
				var err error
				if oauth, err = connection.CheckClient(*in.OAuth); err != nil {
					return nil, err
				}
				for path, u := range map[string]string{"/oauth/authorizationEndpoint": in.OAuth.AuthorizationEndpoint,
					"/oauth/tokenEndpoint": in.OAuth.TokenEndpoint, "/oauth/revocationEndpoint": in.OAuth.RevocationEndpoint} {
					if msg := s.checkURL(u); u != "" && msg != "" {
						return nil, &fault.Error{Kind: fault.Invalid, Code: credential.CodeInvalid, Message: path + ": " + msg,
							Violations: []inputschema.Violation{{Path: path, Message: msg}}}
					}
				}
			}
			if _, ok := s.Providers[in.Provider]; !ok {
				return nil, &fault.Error{Kind: fault.Invalid, Code: credential.CodeInvalid,
					Message:    fmt.Sprintf("/provider: unknown provider %q (known: %s)", in.Provider, strings.Join(s.Providers.Names(), ", ")),
					Violations: []inputschema.Violation{{Path: "/provider", Message: "unknown provider"}}}
			}
			return s.Vault.Create(ctx, credential.New{Org: OrgOf(call.Exec), Name: in.Name, Provider: in.Provider,
				Secret: credential.NewSecret(in.Secret), OAuth: oauth}, call.Exec.Subject.Ref)
		},
		"contributions/credential-list.json": func(ctx context.Context, call kernel.Call) (any, error) {
			cs, err := s.Vault.List(ctx, OrgOf(call.Exec))
			return map[string]any{"credentials": cs}, err
		},
		"contributions/credential-delete.json": func(ctx context.Context, call kernel.Call) (any, error) {
			id, err := idOf(call.Input)
			if err != nil {
				return nil, err
			}
			meta, err := s.Vault.Get(ctx, id)
			if err == nil && meta.Org != OrgOf(call.Exec) {
				return nil, fault.New(fault.NotFound, credential.CodeNotFound, "no credential %q", id)
			}
			if err != nil {
				return nil, err
			}
			if err := s.Vault.Delete(ctx, id); err != nil {
				return nil, err
			}
			return Deleted{ID: id, Deleted: true}, nil
		},
	}
	return reg.RegisterFiles(descriptors, handlers)
}

func idOf(input json.RawMessage) (string, error) {
	var in struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(input, &in); err != nil {
		return "", fmt.Errorf("decode validated input: %w", err)
	}
	return in.ID, nil
}
