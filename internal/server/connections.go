package server

import (
	"context"
	"html/template"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/xemahq/xema/internal/answer"
	"github.com/xemahq/xema/internal/connection"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/federation"
)

// Connector finishes a connection at the callback (federation.Federation).
type Connector interface {
	Complete(ctx context.Context, state, code, errCode, errDescription string) (federation.Connected, error)
}

// connectionRoutes are /v1/connections: thin routes onto the connections' capabilities,
// through the whole funnel.
func (s *Server) connectionRoutes(g *echo.Group) {
	g.GET("/connections", s.invokeAs(connection.RefList, http.StatusOK, noID))
	g.POST("/connections", s.kernelRouteStatus(connection.RefConnect, http.StatusOK))
	g.DELETE("/connections/:id", s.invokeAs(connection.RefDisconnect, http.StatusOK, pathID))
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
	done, err := s.Connector.Complete(c.Request().Context(), q.Get("state"), q.Get("code"), q.Get("error"), q.Get("error_description"))
	return s.callbackAnswer(c, err, done)
}

func (s *Server) callbackAnswer(c echo.Context, err error, done federation.Connected) error {
	c.Response().Header().Set("Cache-Control", "no-store")
	c.Response().Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	c.Response().Header().Set("Referrer-Policy", "no-referrer")
	c.Response().Header().Set(echo.HeaderContentType, echo.MIMETextHTMLCharsetUTF8)
	if err != nil {
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
