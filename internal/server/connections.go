package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/xemahq/xema/internal/answer"
	"github.com/xemahq/xema/internal/connection"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/federation"
	"github.com/xemahq/xema/internal/gateway"
)

// Connector finishes a connection at the callback (federation.Federation).
type Connector interface {
	Complete(ctx context.Context, state, code, errCode, errDescription string) (federation.Connected, error)
}

// connectionRoutes are /v1/connections: thin routes onto the connections' capabilities,
// through the whole funnel.
func (s *Server) connectionRoutes(g *echo.Group) {
	g.GET("/connections", s.invokeAs(connection.RefList, http.StatusOK, noID))
	g.POST("/connections", s.connect)
	g.DELETE("/connections/:id", s.invokeAs(connection.RefDisconnect, http.StatusOK, pathID))
}

// connectCookie names the cookie that binds an authorization request to the browser that
// started it: the callback finishes only a request whose state this browser holds. Without
// it, anyone could start a connection of their own and have another person complete it with
// that person's account (a login CSRF): the connection would be the starter's, the account
// the victim's. One cookie per request (named by its state's hash), so a second Connect in
// another tab keeps the first, and a callback for another state clears none but its own.
func connectCookie(state string) string {
	sum := sha256.Sum256([]byte(state))
	return "xema_connect_" + hex.EncodeToString(sum[:8])
}

// wellFormedState says state looks like one the gateway issues (32 random bytes,
// base64url): anything else is refused before the store is asked.
func wellFormedState(state string) bool {
	if len(state) != 43 {
		return false
	}
	_, err := base64.RawURLEncoding.DecodeString(state)
	return err == nil
}

// connect is POST /v1/connections: connection:connect@1, then the cookie that lets this
// browser, and only it, finish the request at the callback.
func (s *Server) connect(c echo.Context) error {
	var input json.RawMessage
	if err := bind(c, &input); err != nil {
		return err
	}
	res, err := s.Gateway.Invoke(c.Request().Context(), execOf(c), gateway.Request{Ref: connection.RefConnect, Input: input})
	if err != nil || res.Denial != nil || res.Held != nil {
		ans, _ := answerOf(res, err)
		return writeAnswer(c, ans)
	}
	var started connection.Started
	if err := json.Unmarshal(res.Output, &started); err != nil {
		return fmt.Errorf("connect: decode output: %w", err)
	}
	u, err := url.Parse(started.URL)
	if err != nil || u.Query().Get("state") == "" {
		return fmt.Errorf("connect: the authorization URL carries no state")
	}
	state := u.Query().Get("state")
	c.SetCookie(&http.Cookie{Name: connectCookie(state), Value: state, Path: connection.CallbackPath,
		Expires: started.ExpiresAt, HttpOnly: true, SameSite: http.SameSiteLaxMode,
		Secure: c.Scheme() == "https" || strings.HasPrefix(s.PublicURL, "https://")})
	c.Response().Header().Set("X-Xema-Audit-Id", res.AuditID)
	return c.JSON(http.StatusOK, res.Output)
}

// callbackPage is the page the person's browser lands on after the authorization server.
var callbackPage = template.Must(template.New("callback").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}} · Xema</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:40rem;margin:3rem auto;padding:0 1rem}code{background:#f2f2f2;padding:0 .2em}</style>
</head><body><main>
<h1>{{.Title}}</h1>
<p role="status">{{.Message}}</p>
{{if .Code}}<p>Code: <code>{{.Code}}</code></p>{{end}}
{{if .Next}}<p>{{.Next}}</p>{{end}}
<p><a href="/console/connections">Back to your connections</a>. You can close this window.</p>
</main></body></html>
`))

type callbackView struct {
	Title, Message, Code, Next string
}

// connectionCallback is GET /v1/connections/callback: the authorization server's redirect.
// It carries no gateway token (the browser arrives from the authorization server); the
// single-use state, bound to the org, the owner and the server, is what it is checked by.
func (s *Server) connectionCallback(c echo.Context) error {
	q := c.QueryParams()
	if s.Connector == nil {
		return s.callbackAnswer(c, fault.New(fault.NotImplemented, connection.CodeInvalidState, "this gateway has no connections configured"), federation.Connected{})
	}
	// The request is left untouched when this browser did not start it: its starter may
	// still finish it.
	state := q.Get("state")
	if !wellFormedState(state) {
		return s.callbackAnswer(c, fault.New(fault.Invalid, connection.CodeInvalidState,
			"the callback's state is not one this gateway issues: start connecting again from the console's Connections page"), federation.Connected{})
	}
	ck, err := c.Cookie(connectCookie(state))
	if err != nil || subtle.ConstantTimeCompare([]byte(ck.Value), []byte(state)) != 1 {
		return s.callbackAnswer(c, fault.New(fault.Invalid, connection.CodeInvalidState,
			"this authorization was not started in this browser: a connection is finished in the browser that started it (the console's Connections page)"), federation.Connected{})
	}
	// The request is used up now, whatever the outcome: its cookie goes with it.
	c.SetCookie(&http.Cookie{Name: connectCookie(state), Path: connection.CallbackPath, MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteLaxMode})
	done, err := s.Connector.Complete(c.Request().Context(), state, q.Get("code"), q.Get("error"), q.Get("error_description"))
	return s.callbackAnswer(c, err, done)
}

func (s *Server) callbackAnswer(c echo.Context, err error, done federation.Connected) error {
	c.Response().Header().Set("Cache-Control", "no-store")
	c.Response().Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	c.Response().Header().Set("Referrer-Policy", "no-referrer")
	c.Response().Header().Set(echo.HeaderContentType, echo.MIMETextHTMLCharsetUTF8)
	if err != nil {
		var typed *fault.Error
		if !errors.As(err, &typed) {
			slog.ErrorContext(c.Request().Context(), "connection callback failed", "err", err)
		}
		fe := fault.Of(err)
		c.Response().WriteHeader(answer.Status(fe.Kind))
		return callbackPage.Execute(c.Response(), callbackView{Title: "Not connected", Message: fe.Message, Code: fe.Code,
			Next: "Start again from the console's Connections page (or xema connection connect)."})
	}
	v := done.Connection
	whose := "your account"
	if v.Owner.Kind == "org" {
		whose = "the org's account"
	}
	view := callbackView{Title: "Connected", Message: "Connected " + whose + " to " + v.ProviderID + "."}
	switch {
	case done.Sync != nil && len(done.Sync.Added) > 0:
		view.Next = "Its tools were listed: an org administrator approves them (POST /v1/grants with the digest of " +
			v.ProviderID + " " + done.Sync.Server.Version + ") before agents can call them."
	case done.SyncError != "":
		view.Next = "Listing its tools failed: " + done.SyncError + " An org administrator can sync it again (xema mcp-server sync " + v.ProviderID + ")."
	}
	c.Response().WriteHeader(http.StatusOK)
	return callbackPage.Execute(c.Response(), view)
}
