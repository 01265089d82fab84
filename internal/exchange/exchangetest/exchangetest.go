// Package exchangetest runs a real RFC 8693 authorization server in process for tests: the
// op package of github.com/zitadel/oidc/v3 over its example storage, with a storage that
// trusts the subject and actor tokens a given JWKS verifies (the gateway's issuer), issues
// JWT access tokens whose act names the actor (nesting the subject token's own act), and
// enforces may_act. It can be told to refuse exchanges.
package exchangetest

import (
	"context"
	"crypto/rand"
	"errors"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// Client is the gateway's client at the server.
const (
	ClientID     = "xema-gateway"
	ClientSecret = "exchange-test-secret"
)

// Server is the running authorization server.
type Server struct {
	URL           string // the issuer
	TokenEndpoint string
	JWKSURL       string

	mu        sync.Mutex
	trusted   keyfunc.Keyfunc
	refuse    string
	exchanges int
}

// Start runs a server until the test ends. Trust must name the JWKS of the tokens to accept
// before the first exchange.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{}
	srv := httptest.NewUnstartedServer(nil)
	s.URL = "http://" + srv.Listener.Addr().String()
	s.TokenEndpoint, s.JWKSURL = s.URL+"/oauth/token", s.URL+"/keys"
	client := storage.WebClient(ClientID, ClientSecret)
	st := &store{Storage: storage.NewStorageWithClients(storage.NewUserStore(s.URL), map[string]*storage.Client{ClientID: client}), s: s}
	var key [32]byte
	if _, err := rand.Read(key[:]); err != nil {
		t.Fatal(err)
	}
	provider, err := op.NewProvider(&op.Config{CryptoKey: key, CryptoKeyId: "k1", AuthMethodPost: true}, st,
		op.StaticIssuer(s.URL), op.WithAllowInsecure())
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = provider
	srv.Start()
	t.Cleanup(srv.Close)
	return s
}

// Trust accepts subject and actor tokens that the JWK Set at jwksURL verifies.
func (s *Server) Trust(ctx context.Context, jwksURL string) error {
	k, err := keyfunc.NewDefaultCtx(ctx, []string{jwksURL})
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.trusted = k
	s.mu.Unlock()
	return nil
}

// Refuse makes every exchange from now on fail with the RFC 6749 error code ("" accepts).
func (s *Server) Refuse(code string) {
	s.mu.Lock()
	s.refuse = code
	s.mu.Unlock()
}

// Exchanges is the number of exchanges the server has granted.
func (s *Server) Exchanges() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exchanges
}

// store is the example storage with token exchange as the tests need it.
type store struct {
	*storage.Storage
	s *Server
}

// jwtClient issues JWT access tokens, which a provider verifies by the server's JWKS.
type jwtClient struct{ op.Client }

func (jwtClient) AccessTokenType() op.AccessTokenType { return op.AccessTokenTypeJWT }

func (st *store) GetClientByClientID(ctx context.Context, id string) (op.Client, error) {
	c, err := st.Storage.GetClientByClientID(ctx, id)
	if err != nil {
		return nil, err
	}
	return jwtClient{c}, nil
}

func (st *store) verify(token string) (string, map[string]any, error) {
	st.s.mu.Lock()
	k := st.s.trusted
	st.s.mu.Unlock()
	if k == nil {
		return "", nil, errors.New("no trusted issuer")
	}
	claims := jwt.MapClaims{}
	if _, err := jwt.ParseWithClaims(token, claims, k.Keyfunc, jwt.WithExpirationRequired()); err != nil {
		return "", nil, err
	}
	sub, _ := claims["sub"].(string)
	return sub, claims, nil
}

func (st *store) VerifyExchangeSubjectToken(_ context.Context, token string, _ oidc.TokenType) (string, string, map[string]any, error) {
	sub, claims, err := st.verify(token)
	return token, sub, claims, err
}

func (st *store) VerifyExchangeActorToken(_ context.Context, token string, _ oidc.TokenType) (string, string, map[string]any, error) {
	sub, claims, err := st.verify(token)
	return token, sub, claims, err
}

// ValidateTokenExchangeRequest refuses as told, and an actor the subject's may_act does not
// name (invalid_grant); it issues access tokens.
func (st *store) ValidateTokenExchangeRequest(_ context.Context, req op.TokenExchangeRequest) error {
	st.s.mu.Lock()
	refuse := st.s.refuse
	st.s.mu.Unlock()
	switch refuse {
	case "":
	case "unauthorized_client":
		return oidc.ErrUnauthorizedClient().WithDescription("this client may not exchange tokens")
	default:
		return oidc.ErrInvalidGrant().WithDescription("refused by the test")
	}
	if may, ok := req.GetExchangeSubjectTokenClaims()["may_act"]; ok && !mayAct(may, req.GetExchangeActor()) {
		return oidc.ErrInvalidGrant().WithDescription("the subject's may_act does not name the actor")
	}
	req.SetRequestedTokenType(oidc.AccessTokenType)
	return nil
}

func mayAct(may any, actor string) bool {
	list, ok := may.([]any)
	if !ok {
		list = []any{may}
	}
	return slices.ContainsFunc(list, func(e any) bool {
		m, _ := e.(map[string]any)
		return m["sub"] == actor
	})
}

func (st *store) CreateTokenExchangeRequest(context.Context, op.TokenExchangeRequest) error {
	st.s.mu.Lock()
	st.s.exchanges++
	st.s.mu.Unlock()
	return nil
}

// GetPrivateClaimsFromTokenExchangeRequest writes act: the actor, before it the subject
// token's own act chain (RFC 8693 §4.1).
func (st *store) GetPrivateClaimsFromTokenExchangeRequest(_ context.Context, req op.TokenExchangeRequest) (map[string]any, error) {
	if req.GetExchangeActor() == "" {
		return map[string]any{}, nil
	}
	act := map[string]any{"sub": req.GetExchangeActor()}
	if prior, ok := req.GetExchangeSubjectTokenClaims()["act"]; ok {
		act["act"] = prior
	}
	return map[string]any{"act": act}, nil
}
