package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"strings"

	"github.com/spf13/pflag"

	"github.com/xemahq/xema/internal/notify"
	"github.com/xemahq/xema/internal/secretbox"
)

// notifyFlags are who is told of held calls: --approval-webhook (repeatable; in the config
// file also a mapping per webhook with its org, secret file and input opt-in),
// --approval-webhook-secret-file, --approval-webhook-include-input and --approval-chat.
type notifyFlags struct {
	webhooks     webhookList
	secretFile   string
	includeInput bool
	chats        []string
}

func (n *notifyFlags) addTo(f *pflag.FlagSet) {
	f.Var(&n.webhooks, "approval-webhook", "a URL told of every held call's steps (held, decided, expired, withdrawn) with a signed JSON POST; repeatable; in the config file also {url, org, secret-file, include-input} to limit it to one org")
	f.StringVar(&n.secretFile, "approval-webhook-secret-file", "", "file holding the secret the approval webhooks' X-Xema-Signature is keyed with (a webhook of the config file may name its own)")
	f.BoolVar(&n.includeInput, "approval-webhook-include-input", false, "add the held call's input to the webhook events (off: never sent)")
	f.StringArrayVar(&n.chats, "approval-chat", nil, "ORG=CONVERSATION: tell that org's conversation of its held calls through its connector:channel.send-message@1 binding; repeatable")
}

// config is the notify configuration; deep links start at publicURL, else at the listen
// address.
func (n *notifyFlags) config(publicURL, addr string, tls bool) (notify.Config, error) {
	cfg := notify.Config{ConsoleURL: publicURL}
	if cfg.ConsoleURL == "" {
		scheme := "http://"
		if tls {
			scheme = "https://"
		}
		host, port, err := net.SplitHostPort(addr)
		if err == nil && (host == "" || host == "0.0.0.0" || host == "::") {
			addr = net.JoinHostPort("localhost", port)
		}
		cfg.ConsoleURL = scheme + addr
	}
	secrets := map[string][]byte{}
	secret := func(file string) ([]byte, error) {
		if file == "" {
			return nil, nil
		}
		if s, ok := secrets[file]; ok {
			return s, nil
		}
		raw, err := secretbox.ReadPrivate(file) // as private as the master key: it forges events
		if err != nil {
			return nil, fmt.Errorf("--approval-webhook-secret-file: %w", err)
		}
		s := bytes.TrimSpace(raw)
		if len(s) < 16 {
			return nil, fmt.Errorf("--approval-webhook-secret-file %s: the secret is %d bytes; want at least 16", file, len(s))
		}
		secrets[file] = s
		return s, nil
	}
	for _, w := range n.webhooks.items {
		file := w.SecretFile
		if file == "" {
			file = n.secretFile
		}
		s, err := secret(file)
		if err != nil {
			return notify.Config{}, err
		}
		include := n.includeInput
		if w.IncludeInput != nil {
			include = *w.IncludeInput
		}
		cfg.Webhooks = append(cfg.Webhooks, notify.Webhook{URL: w.URL, Org: w.Org, Secret: s, IncludeInput: include})
	}
	for _, c := range n.chats {
		org, conv, ok := strings.Cut(c, "=")
		if !ok || org == "" || conv == "" {
			return notify.Config{}, fmt.Errorf("--approval-chat %q: want ORG=CONVERSATION", c)
		}
		cfg.Chats = append(cfg.Chats, notify.Chat{Org: org, Conversation: conv})
	}
	return cfg, nil
}

// webhookSpec is one --approval-webhook: a URL, or in the config file a mapping.
type webhookSpec struct {
	URL          string `json:"url"`
	Org          string `json:"org,omitempty"`
	SecretFile   string `json:"secret-file,omitempty"`
	IncludeInput *bool  `json:"include-input,omitempty"`
}

// webhookList is the value of --approval-webhook: a repeatable flag whose items are URLs,
// or JSON objects (what the config file's mappings are turned into: structuredFlag).
type webhookList struct{ items []webhookSpec }

var (
	_ pflag.SliceValue = (*webhookList)(nil)
	_ structuredFlag   = (*webhookList)(nil)
)

func (*webhookList) structured() {}

func (l *webhookList) String() string {
	urls := make([]string, len(l.items))
	for i, w := range l.items {
		urls[i] = w.URL
	}
	return "[" + strings.Join(urls, ",") + "]"
}

func (*webhookList) Type() string { return "url" }

func parseWebhook(s string) (webhookSpec, error) {
	if !strings.HasPrefix(strings.TrimSpace(s), "{") {
		return webhookSpec{URL: s}, nil
	}
	var w webhookSpec
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return webhookSpec{}, fmt.Errorf("a webhook mapping takes url, org, secret-file and include-input: %w", err)
	}
	if w.URL == "" {
		return webhookSpec{}, fmt.Errorf("a webhook mapping needs url")
	}
	return w, nil
}

func (l *webhookList) Set(s string) error { return l.Append(s) }

func (l *webhookList) Append(s string) error {
	w, err := parseWebhook(s)
	if err != nil {
		return err
	}
	l.items = append(l.items, w)
	return nil
}

func (l *webhookList) Replace(ss []string) error {
	items := make([]webhookSpec, 0, len(ss))
	for _, s := range ss {
		w, err := parseWebhook(s)
		if err != nil {
			return err
		}
		items = append(items, w)
	}
	l.items = items
	return nil
}

func (l *webhookList) GetSlice() []string {
	out := make([]string, len(l.items))
	for i, w := range l.items {
		out[i] = w.URL
	}
	return out
}
