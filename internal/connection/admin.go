package connection

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"

	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/kernel"
	"github.com/xemahq/xema/internal/store"
)

// Refs of the connections' capabilities (the routes under /v1/connections).
const (
	RefList       = "connection:list@1"
	RefConnect    = "connection:connect@1"
	RefDisconnect = "connection:disconnect@1"
)

//go:embed contributions/*.json
var descriptors embed.FS

// Contributions are the capabilities' descriptors (the OpenAPI document reads their schemas).
var Contributions fs.FS = descriptors

// Register queues the connections' capabilities on reg.
func (s *Service) Register(reg *kernel.Registry) error {
	return reg.RegisterFiles(descriptors, map[string]kernel.Handler{
		"contributions/connection-list.json":       s.list,
		"contributions/connection-connect.json":    s.connect,
		"contributions/connection-disconnect.json": s.disconnect,
	})
}

// ServerView is a server the caller can connect: whose account it takes and the status of
// the one that serves the caller (the org's, or the caller's own).
type ServerView struct {
	// ProviderID is an MCP server's provider id, or an OAuth credential's id.
	ProviderID string `json:"providerId"`
	// Name is an OAuth credential's name and provider (e.g. "acme GitHub (github)").
	Name      string `json:"name,omitempty"`
	Owner     string `json:"owner"`
	URL       string `json:"url"`
	Status    string `json:"status"`
	Connected bool   `json:"connected"`
}

// person is the caller as the owner of a user connection: only a person has one.
func person(ec identity.ExecContext) (Owner, error) {
	if ec.Subject.Kind != "user" || ec.Delegation != nil {
		return Owner{}, fault.New(fault.Denied, CodePersonOnly, "only a person, calling as themselves, connects or lists their own accounts")
	}
	return Owner{Kind: store.OwnerUser, Ref: ec.Subject.Ref}, nil
}

// list answers the org's connectable servers and the connections the caller may see: their
// own and the org's, every one of the org's for an org administrator.
func (s *Service) list(ctx context.Context, call kernel.Call) (any, error) {
	ec := call.Exec
	me, err := person(ec)
	if err != nil {
		return nil, err
	}
	servers, err := s.servers(ctx, ec.Org)
	if err != nil {
		return nil, err
	}
	all, err := s.List(ctx, ec.Org)
	if err != nil {
		return nil, err
	}
	conns := make([]View, 0, len(all))
	for _, v := range all {
		if ec.OrgAdmin() || v.Owner.Kind == store.OwnerOrg || v.Owner == me {
			conns = append(conns, v)
		}
	}
	views := make([]ServerView, 0, len(servers))
	for _, srv := range servers {
		owner := Owner{Kind: store.OwnerOrg}
		if srv.auth.Owner == store.OwnerUser {
			owner = me
		}
		status, _, err := s.StatusOf(ctx, ec.Org, srv.id, owner)
		if err != nil {
			return nil, err
		}
		views = append(views, ServerView{ProviderID: srv.id, Name: srv.name, Owner: srv.auth.Owner, URL: srv.url, Status: status, Connected: status == StatusConnected})
	}
	return map[string]any{"connections": conns, "servers": views}, nil
}

type oauthServer struct {
	id, name, url string
	auth          Server
}

// servers are org's MCP servers registered with auth oauth, then its OAuth credentials.
func (s *Service) servers(ctx context.Context, org string) ([]oauthServer, error) {
	all, err := s.store.ListMCPServers(ctx)
	if err != nil {
		return nil, fmt.Errorf("list mcp servers: %w", err)
	}
	owners, err := s.store.BiomeOwners(ctx)
	if err != nil {
		return nil, fmt.Errorf("list mcp servers: %w", err)
	}
	var out []oauthServer
	for _, m := range all {
		if m.Auth != "oauth" || owners[m.ProviderID] != org {
			continue
		}
		var srv Server
		if err := decodeServer(m.OAuth, &srv); err != nil {
			return nil, fmt.Errorf("mcp server %s: oauth: %w", m.ProviderID, err)
		}
		out = append(out, oauthServer{id: m.ProviderID, url: m.URL, auth: srv})
	}
	creds, err := s.store.ListCredentials(ctx, org)
	if err != nil {
		return nil, fmt.Errorf("list credentials: %w", err)
	}
	for _, c := range creds {
		if len(c.OAuth) == 0 {
			continue
		}
		var cl Client
		if err := json.Unmarshal(c.OAuth, &cl); err != nil {
			return nil, fmt.Errorf("credential %s: oauth: %w", c.ID, err)
		}
		name := c.Provider
		if c.Name != "" {
			name = c.Name + " (" + c.Provider + ")"
		}
		out = append(out, oauthServer{id: c.ID, name: name, url: cl.AuthorizationEndpoint, auth: Server{Owner: cl.Owner}})
	}
	return out, nil
}

// connect starts the caller's own connection, or the org's for an org administrator.
func (s *Service) connect(ctx context.Context, call kernel.Call) (any, error) {
	var in struct {
		ProviderID string `json:"providerId"`
		Owner      string `json:"owner"`
	}
	if err := json.Unmarshal(call.Input, &in); err != nil {
		return nil, fmt.Errorf("decode validated input: %w", err)
	}
	ec := call.Exec
	me, err := person(ec)
	if err != nil {
		return nil, err
	}
	if in.Owner == "" {
		srv, err := s.server(ctx, ec.Org, in.ProviderID)
		if err != nil {
			return nil, err
		}
		in.Owner = srv.Owner
	}
	owner := me
	if in.Owner == store.OwnerOrg {
		if !ec.OrgAdmin() {
			return nil, fault.New(fault.Denied, CodeOrgAdminOnly, "only an org administrator connects the org's account to %s", in.ProviderID)
		}
		owner = Owner{Kind: store.OwnerOrg}
	}
	return s.Start(ctx, ec.Org, in.ProviderID, owner, ec.Subject.Ref)
}

// disconnect removes a connection: the caller's own, or any of the org's for an org
// administrator. Another's connection is answered as unknown to a member.
func (s *Service) disconnect(ctx context.Context, call kernel.Call) (any, error) {
	var in struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(call.Input, &in); err != nil {
		return nil, fmt.Errorf("decode validated input: %w", err)
	}
	ec := call.Exec
	c, err := s.store.GetConnectionByID(ctx, ec.Org, in.ID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, fault.New(fault.NotFound, CodeNotFound, "no connection %q in this org", in.ID)
	case err != nil:
		return nil, fmt.Errorf("connection %s: %w", in.ID, err)
	}
	mine := c.OwnerKind == store.OwnerUser && c.OwnerRef == ec.Subject.Ref && ec.Subject.Kind == "user" && ec.Delegation == nil
	switch {
	case ec.OrgAdmin(), mine:
	case c.OwnerKind == store.OwnerOrg:
		return nil, fault.New(fault.Denied, CodeOrgAdminOnly, "only an org administrator disconnects the org's account")
	default:
		return nil, fault.New(fault.NotFound, CodeNotFound, "no connection %q in this org", in.ID)
	}
	return s.Disconnect(ctx, ec.Org, in.ID)
}
