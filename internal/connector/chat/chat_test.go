package chat_test

// Slack cannot run here: slackServer follows the Slack Web API's documented wire format for
// chat.postMessage (POST /api/chat.postMessage with "Authorization: Bearer xoxb-...", a JSON
// body {channel, text}; HTTP 200 {"ok": true, "channel", "ts", "message"} on success, HTTP
// 200 {"ok": false, "error": "invalid_auth" | "channel_not_found" | ...} on failure, HTTP 429
// with Retry-After when rate limited). Telegram is tested against the real telegram-test-api
// server in test/e2e.

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/xemahq/xema/internal/connector"
	"github.com/xemahq/xema/internal/connector/chat"
	"github.com/xemahq/xema/internal/credential"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/kernel"
)

const token = "xoxb-S3CRET-slack-token"

func slackServer(t *testing.T, limited *bool, posted *[]string) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		if *limited {
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		if r.URL.Path != "/api/chat.postMessage" || r.Method != http.MethodPost {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		var in struct{ Channel, Text string }
		_ = json.NewDecoder(r.Body).Decode(&in)
		switch {
		case r.Header.Get("Authorization") != "Bearer "+token:
			_ = json.NewEncoder(w).Encode(map[string]any{"ok": false, "error": "invalid_auth"})
		case in.Channel != "C0SUPPORT":
			_ = json.NewEncoder(w).Encode(map[string]any{"ok": false, "error": "channel_not_found"})
		default:
			*posted = append(*posted, in.Text)
			_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "channel": in.Channel, "ts": "1767225600.000100",
				"message": map[string]any{"text": in.Text, "ts": "1767225600.000100"}})
		}
	}))
}

func TestSlack(t *testing.T) {
	var limited bool
	var posted []string
	srv := slackServer(t, &limited, &posted)
	defer srv.Close()
	send := chat.Slack().Handlers[chat.RefSendMessage]
	run := func(tok, channel string) (any, error) {
		return send(context.Background(), connector.Target{BaseURL: srv.URL, Config: json.RawMessage(`{"channel":"` + channel + `"}`),
			Token: credential.NewSecret(tok), HTTP: http.DefaultClient},
			kernel.Call{Ref: chat.RefSendMessage, Input: json.RawMessage(`{"conversation":"support","text":"hello"}`)})
	}
	out, err := run(token, "C0SUPPORT")
	if err != nil {
		t.Fatal(err)
	}
	m := out.(chat.Message)
	if m.MessageID != "1767225600.000100" || m.Conversation != "support" || m.SentAt != "2026-01-01T00:00:00Z" || len(posted) != 1 {
		t.Fatalf("message %+v, posted %v", m, posted)
	}
	for _, tc := range []struct {
		name, tok, channel string
		limit              bool
		want               string
	}{
		{"rejected token", "xoxb-wrong", "C0SUPPORT", false, connector.CodeCredentialRejected},
		{"unknown channel", token, "C0GONE", false, connector.CodeConversationGone},
		{"rate limited", token, "C0SUPPORT", true, connector.CodeRateLimited},
	} {
		limited = tc.limit
		_, err := run(tc.tok, tc.channel)
		var re *fault.Error
		if !errors.As(err, &re) || re.Code != tc.want || strings.Contains(re.Message, token) {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.want)
		}
	}
}

func TestConfigChecks(t *testing.T) {
	for _, tc := range []struct {
		p      *connector.Provider
		config string
		ok     bool
	}{
		{chat.Slack(), `{"channel":"C0123ABCD"}`, true},
		{chat.Slack(), `{"channel":"#general"}`, false},
		{chat.Slack(), `{}`, false},
		{chat.Telegram(), `{"chatId":"-1001234"}`, true},
		{chat.Telegram(), `{"chatId":"@support_channel"}`, true},
		{chat.Telegram(), `{"chatId":"abc"}`, false},
	} {
		if err := tc.p.CheckConfig(json.RawMessage(tc.config)); (err == nil) != tc.ok {
			t.Errorf("%s %s: %v", tc.p.Name, tc.config, err)
		}
	}
}
