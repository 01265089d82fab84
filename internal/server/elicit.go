package server

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/xemahq/xema/internal/answer"
	"github.com/xemahq/xema/internal/policy"
)

// URL-mode elicitation (MCP 2025-11-25): a tools/call of xema_capabilities_invoke denied for
// want of a connection (CONNECTION_REQUIRED, CONNECTION_EXPIRED) is answered, to a request
// whose own client capabilities declare elicitation.url, with the URLElicitationRequired
// error (-32042) asking its user to open the console page that connects the account; the
// client retries once they have. The page, not the authorization server's URL, is given: the
// person signs in to the gateway there and starts the connection as themselves, so an agent
// cannot have a person's connection completed with an account of its choosing. The MCP
// endpoint is stateless: no notifications/elicitation/complete follows; the retry is the
// client's, and a request that did not declare the capability gets the denial itself.

// connectSlot is where the invoke tool leaves the connect suggestion of a denial, for the
// middleware of a tools/call that declared URL elicitation.
type connectSlot struct{ connect *policy.Suggestion }

type connectSlotKey struct{}

// elicitMiddleware answers a denied tools/call that declared URL elicitation, and left a
// connect suggestion in its slot, with the URLElicitationRequired error.
func (s *Server) elicitMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method != "tools/call" || !declaresURLElicitation(req.GetParams()) {
			return next(ctx, method, req)
		}
		slot := &connectSlot{}
		res, err := next(context.WithValue(ctx, connectSlotKey{}, slot), method, req)
		if err != nil || slot.connect == nil {
			return res, err
		}
		c := slot.connect
		whose := "your account"
		if c.Owner == "org" {
			whose = "the org's account (an org admin connects it)"
		}
		return nil, mcp.URLElicitationRequiredError([]*mcp.ElicitParams{{Mode: "url", URL: c.URL, ElicitationID: elicitationID(),
			Message: "This call needs " + whose + " connected to " + c.Server + ": open the page, connect it, then retry."}})
	}
}

// declaresURLElicitation says the request's own client capabilities declare URL elicitation.
func declaresURLElicitation(p mcp.Params) bool {
	if p == nil {
		return false
	}
	caps, _ := p.GetMeta()[clientCapabilitiesMeta].(map[string]any)
	el, _ := caps["elicitation"].(map[string]any)
	_, ok := el["url"].(map[string]any)
	return ok
}

// offerConnect leaves the connect suggestion of a denial in the request's slot, if it has one.
func offerConnect(ctx context.Context, ans answer.Answer) {
	slot, ok := ctx.Value(connectSlotKey{}).(*connectSlot)
	if !ok || ans.Status != http.StatusForbidden {
		return
	}
	var d struct {
		Suggestions []policy.Suggestion `json:"suggestions"`
	}
	if json.Unmarshal(ans.Body, &d) != nil {
		return
	}
	for i, sg := range d.Suggestions {
		if sg.Kind == "connect" && sg.URL != "" {
			slot.connect = &d.Suggestions[i]
			return
		}
	}
}

func elicitationID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return "elc_" + base64.RawURLEncoding.EncodeToString(b)
}
