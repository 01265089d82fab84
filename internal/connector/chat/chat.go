// Package chat is the chat family: connector:channel.send-message@1 on Slack (Web API
// chat.postMessage) and Telegram (Bot API sendMessage). It is a family contract: the caller
// names the conversation and the text; the conversation's binding decides the provider.
package chat

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/xemahq/xema/internal/connector"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/kernel"
	"github.com/xemahq/xema/internal/runner"
)

// RefSendMessage is the family's capability.
const RefSendMessage = "connector:channel.send-message@1"

// Message is the answer, the same for every provider.
type Message struct {
	MessageID    string `json:"messageId"`
	Conversation string `json:"conversation"`
	SentAt       string `json:"sentAt"`
}

// Input is the input of connector:channel.send-message@1.
type Input struct {
	Conversation string `json:"conversation"`
	Text         string `json:"text"`
}

type send func(ctx context.Context, t connector.Target, text string) (id string, sentAt time.Time, err error)

func provider(name string, fn send, check func(json.RawMessage) error) *connector.Provider {
	return &connector.Provider{Name: name, Conversational: true, CheckConfig: check,
		Handlers: map[string]connector.Handler{RefSendMessage: func(ctx context.Context, t connector.Target, call kernel.Call) (any, error) {
			var in Input
			if err := json.Unmarshal(call.Input, &in); err != nil {
				return nil, fmt.Errorf("decode validated input: %w", err)
			}
			id, at, err := fn(ctx, t, in.Text)
			if err != nil {
				return nil, err
			}
			return Message{MessageID: id, Conversation: in.Conversation, SentAt: at.UTC().Format(time.RFC3339)}, nil
		}}}
}

// Slack posts with chat.postMessage (Slack Web API); config {"channel": "C0123"}. The base
// URL is https://slack.com (the API lives under /api).
func Slack() *connector.Provider {
	return provider("slack", slackSend, func(config json.RawMessage) error {
		var c struct {
			Channel string `json:"channel"`
		}
		if json.Unmarshal(config, &c) != nil || !slackChannel.MatchString(c.Channel) {
			return fmt.Errorf("/config/channel must be a Slack channel id (e.g. \"C0123ABCD\")")
		}
		return nil
	})
}

var slackChannel = regexp.MustCompile(`^[A-Z0-9]{2,40}$`)

func slackSend(ctx context.Context, t connector.Target, text string) (string, time.Time, error) {
	var c struct {
		Channel string `json:"channel"`
	}
	_ = json.Unmarshal(t.Config, &c)
	r, err := connector.Do(ctx, t, "slack", connector.Request{Method: http.MethodPost, URL: connector.Join(t.BaseURL, "/api/chat.postMessage"),
		Header: map[string]string{"Authorization": "Bearer " + t.Token.Reveal(), "Content-Type": "application/json; charset=utf-8"},
		Body:   map[string]string{"channel": c.Channel, "text": text}})
	if err != nil {
		return "", time.Time{}, err
	}
	if !r.OK() {
		return "", time.Time{}, connector.Failure("slack", r)
	}
	// Slack answers HTTP 200 with ok:false and an error string for failures.
	var body struct {
		OK    bool   `json:"ok"`
		Error string `json:"error"`
		TS    string `json:"ts"`
	}
	if err := r.Decode("slack", &body); err != nil {
		return "", time.Time{}, err
	}
	if !body.OK {
		return "", time.Time{}, slackError(r, body.Error)
	}
	secs, _ := strconv.ParseFloat(body.TS, 64)
	return body.TS, time.Unix(int64(secs), 0), nil
}

func slackError(r *connector.Response, code string) error {
	switch code {
	case "invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired":
		r.Status = http.StatusUnauthorized
		return connector.Failure("slack", r)
	case "missing_scope", "not_in_channel", "restricted_action":
		r.Status = http.StatusForbidden
		return connector.Failure("slack", r)
	case "ratelimited":
		r.Status = http.StatusTooManyRequests
		return connector.Failure("slack", r)
	case "channel_not_found", "is_archived":
		return fault.New(fault.Provider, connector.CodeConversationGone, "slack does not know the bound channel (%s); an admin must fix the binding", code)
	}
	return fault.New(fault.Internal, runner.CodeProviderError, "slack refused the message (%s)", code)
}

// Telegram sends with the Bot API's sendMessage; config {"chatId": "-1001234"}. The base URL
// is https://api.telegram.org. The Bot API takes the token in the URL path (/bot<token>/),
// not in a header; Do never lets that URL into an error.
func Telegram() *connector.Provider {
	return provider("telegram", telegramSend, func(config json.RawMessage) error {
		var c struct {
			ChatID string `json:"chatId"`
		}
		if json.Unmarshal(config, &c) != nil || !telegramChat.MatchString(c.ChatID) {
			return fmt.Errorf("/config/chatId must be a Telegram chat id (an integer) or @channelusername")
		}
		return nil
	})
}

var telegramChat = regexp.MustCompile(`^(-?[0-9]{1,20}|@[A-Za-z0-9_]{5,32})$`)

func telegramSend(ctx context.Context, t connector.Target, text string) (string, time.Time, error) {
	var c struct {
		ChatID string `json:"chatId"`
	}
	_ = json.Unmarshal(t.Config, &c)
	r, err := connector.Do(ctx, t, "telegram", connector.Request{Method: http.MethodPost,
		URL:  connector.Join(t.BaseURL, "/bot"+t.Token.Reveal()+"/sendMessage"),
		Body: map[string]string{"chat_id": c.ChatID, "text": text}})
	if err != nil {
		return "", time.Time{}, err
	}
	var body struct {
		OK          bool   `json:"ok"`
		Description string `json:"description"`
		Result      struct {
			MessageID int64 `json:"message_id"`
			Date      int64 `json:"date"`
		} `json:"result"`
	}
	if err := r.Decode("telegram", &body); err != nil {
		return "", time.Time{}, err
	}
	if !r.OK() || !body.OK {
		if r.Status == http.StatusBadRequest || r.Status == http.StatusNotFound && body.Description != "Not Found" {
			return "", time.Time{}, &fault.Error{Kind: fault.Provider, Code: connector.CodeConversationGone,
				ProviderStatus: r.Status, Message: "telegram refused the bound chat; an admin must fix the binding"}
		}
		if r.Status == http.StatusNotFound {
			// The Bot API answers 404 for an unknown token.
			r.Status = http.StatusUnauthorized
		}
		return "", time.Time{}, connector.Failure("telegram", r)
	}
	return strconv.FormatInt(body.Result.MessageID, 10), telegramDate(body.Result.Date), nil
}

// maxUnixSeconds is 9999-12-31T23:59:59Z, the last instant an RFC 3339 date-time can write.
const maxUnixSeconds = 253402300799

// telegramDate reads a message's date: Unix seconds in the Bot API; a value past year 9999 is
// milliseconds (some Bot API stand-ins answer those), which as seconds would format as a
// date-time the capability's outputSchema refuses. 0 or out of range is now.
func telegramDate(d int64) time.Time {
	switch {
	case d > 0 && d <= maxUnixSeconds:
		return time.Unix(d, 0)
	case d > maxUnixSeconds && d/1000 <= maxUnixSeconds:
		return time.UnixMilli(d)
	}
	return time.Now()
}
