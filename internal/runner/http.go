package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/kernel"
	"github.com/xemahq/xema/internal/txntoken"
)

// MaxResponseBytes bounds what the gateway reads from a provider.
const MaxResponseBytes = 4 << 20

// MaxErrorBodyBytes bounds the provider's error body passed on to the caller (providerBody).
const MaxErrorBodyBytes = 4 << 10

// DefaultTimeout applies when an invocation declares no timeoutMs.
const DefaultTimeout = 10 * time.Second

// TokenSource mints the gateway's own service token for outbound calls, scoped to one
// audience (see Audience): a provider's token is good for that provider only, and never
// accepted by the gateway's own API.
type TokenSource interface {
	Token(ctx context.Context, audience string) (string, error)
}

// AudiencePrefix starts the audience of every outbound token.
const AudiencePrefix = "xema-provider:"

// Audience is the audience of the tokens sent to rawURL: "xema-provider:" and the URL's
// origin (scheme://host[:port], lower case, default port omitted).
func Audience(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return AudiencePrefix + "invalid"
	}
	scheme, host, port := strings.ToLower(u.Scheme), strings.ToLower(u.Hostname()), u.Port()
	if (scheme == "http" && port == "80") || (scheme == "https" && port == "443") {
		port = ""
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port != "" {
		host += ":" + port
	}
	return AudiencePrefix + scheme + "://" + host
}

// HTTP POSTs the validated input as JSON to a declared http invocation; a 2xx JSON body is
// the output.
type HTTP struct {
	Client  *http.Client
	URL     string
	Timeout time.Duration
	Tokens  TokenSource
}

// Kind is "http".
func (HTTP) Kind() string { return "http" }

// Audience is the provider's audience: whom its tokens, and its Txn-Tokens, are for.
func (h HTTP) Audience() string { return Audience(h.URL) }

// Run performs the call. The service token is required: there is no anonymous fallback.
func (h HTTP) Run(ctx context.Context, call kernel.Call) (json.RawMessage, error) {
	timeout := h.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	token, err := h.Tokens.Token(ctx, Audience(h.URL))
	if err != nil {
		// A source that says why (a refused token exchange) is answered as it said.
		var e *fault.Error
		if !errors.As(err, &e) {
			e = fault.Wrap(err, fault.Internal, CodeNoToken, "the gateway could not obtain its service token")
		}
		e.NotRun = true // nothing was sent
		return nil, e
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, bytes.NewReader(call.Input))
	if err != nil {
		return nil, fault.Wrap(err, fault.Internal, CodeUnreachable, "invalid provider URL")
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("X-Xema-Ref", call.Ref)
	req.Header.Set("X-Xema-Audit-Id", call.AuditID)
	req.Header.Set("Authorization", "Bearer "+token)
	if call.TxnToken != "" {
		req.Header.Set(txntoken.Header, call.TxnToken)
	}

	resp, err := h.Client.Do(req)
	if err != nil {
		if te := TransportError("provider", err); te != nil {
			return nil, te
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fault.Wrap(err, fault.Internal, CodeProviderTimeout, "provider did not answer within %s", timeout)
		}
		return nil, fault.Wrap(err, fault.Internal, CodeUnreachable, "provider unreachable")
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes+1))
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fault.Wrap(err, fault.Internal, CodeProviderTimeout, "provider did not answer within %s", timeout)
		}
		return nil, fault.Wrap(err, fault.Internal, CodeUnreachable, "reading the provider's answer failed")
	}
	if resp.StatusCode >= 300 && resp.StatusCode <= 399 { // a client that follows redirects is not ours
		return nil, &fault.Error{Kind: fault.Provider, Code: CodeRedirect, ProviderStatus: resp.StatusCode,
			Message: "provider answered a redirect; redirects are not followed"}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		pb, cut := errorBody(resp.Header.Get("Content-Type"), body, token)
		return nil, &fault.Error{Code: CodeProviderError, ProviderStatus: resp.StatusCode,
			Message: fmt.Sprintf("provider answered HTTP %d", resp.StatusCode), ProviderBody: pb, ProviderBodyTruncated: cut}
	}
	if len(body) > MaxResponseBytes {
		return nil, fault.New(fault.Internal, CodeBadResponse, "provider answer exceeds %d bytes", MaxResponseBytes)
	}
	if !json.Valid(body) {
		return nil, fault.New(fault.Internal, CodeBadResponse, "provider answered with a body that is not JSON")
	}
	return body, nil
}

// errorBody is what of a provider's error body the caller sees: its text when its Content-Type
// is JSON or plain text and it is UTF-8, cut to MaxErrorBodyBytes (cut says so). Any other
// type, and a body quoting the gateway's service token (a provider echoing its request
// headers), is passed on as nothing.
func errorBody(contentType string, body []byte, token string) (text string, cut bool) {
	mt, _, err := mime.ParseMediaType(contentType)
	isJSON := mt == "application/json" || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")
	if err != nil || !isJSON && mt != "text/plain" || len(body) == 0 || token != "" && bytes.Contains(body, []byte(token)) {
		return "", false
	}
	if len(body) > MaxErrorBodyBytes {
		body, cut = body[:MaxErrorBodyBytes], true
		// The cut may split a character: drop its leading bytes, at most UTFMax-1 of them.
		for i := 1; i < utf8.UTFMax && !utf8.Valid(body); i++ {
			body = body[:len(body)-1]
		}
	}
	if !utf8.Valid(body) {
		return "", false
	}
	return string(body), cut
}
