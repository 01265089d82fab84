package connector

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/runner"
)

// MaxResponseBytes bounds what a connector reads from a provider.
const MaxResponseBytes = 1 << 20

// DefaultTimeout bounds one provider call when ctx has no earlier deadline.
const DefaultTimeout = 30 * time.Second

// Request is one provider call.
type Request struct {
	Method string
	URL    string
	Body   any               // marshalled as JSON when not nil
	Header map[string]string // the provider's auth header goes here, nowhere else
}

// Response is a provider's answer.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Decode unmarshals the body into v; a body that is not the expected JSON is a typed error.
func (r *Response) Decode(provider string, v any) error {
	if err := json.Unmarshal(r.Body, v); err != nil {
		return &fault.Error{Code: runner.CodeBadResponse, ProviderStatus: r.Status,
			Message: provider + " answered with a body that is not the expected JSON"}
	}
	return nil
}

// Do sends req with the target's client. Transport failures become PROVIDER_UNREACHABLE or
// PROVIDER_TIMEOUT with a message of ours: a *url.Error's text holds the URL, and some
// providers (Telegram) carry the credential in the URL.
func Do(ctx context.Context, t Target, provider string, req Request) (*Response, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	var body io.Reader
	if req.Body != nil {
		raw, err := json.Marshal(req.Body)
		if err != nil {
			return nil, fmt.Errorf("encode %s request: %w", provider, err)
		}
		body = bytes.NewReader(raw)
	}
	hr, err := http.NewRequestWithContext(ctx, req.Method, req.URL, body)
	if err != nil {
		return nil, fault.New(fault.Internal, runner.CodeUnreachable, "%s request could not be built from the binding's base URL", provider)
	}
	hr.Header.Set("Accept", "application/json")
	if body != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	for k, v := range req.Header {
		hr.Header.Set(k, v)
	}
	client := t.HTTP
	if client == nil {
		return nil, fault.New(fault.Internal, runner.CodeUnreachable, "%s: no outbound client configured", provider)
	}
	resp, err := client.Do(hr)
	if err != nil {
		if te := runner.TransportError(provider, err); te != nil {
			te.Err = nil // a *url.Error's text holds the URL
			return nil, te
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, fault.New(fault.Internal, runner.CodeProviderTimeout, "%s did not answer in time", provider)
		}
		return nil, fault.New(fault.Internal, runner.CodeUnreachable, "%s could not be reached at the binding's base URL", provider)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes+1))
	if err != nil {
		return nil, &fault.Error{Code: runner.CodeUnreachable, ProviderStatus: resp.StatusCode, Message: provider + " answer could not be read"}
	}
	if len(raw) > MaxResponseBytes {
		// Refused, never cut: a truncated answer would be decoded as if whole.
		return nil, &fault.Error{Code: runner.CodeBadResponse, ProviderStatus: resp.StatusCode,
			Message: fmt.Sprintf("%s answered more than %d bytes", provider, MaxResponseBytes)}
	}
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: raw}, nil
}

// Failure is the typed error for a non-2xx answer whose meaning is common to providers:
// 401 a rejected credential, 403 a credential without the permission, 429 a rate limit.
// Anything else is PROVIDER_ERROR. The provider's body is never echoed: it may quote input
// or headers back.
func Failure(provider string, r *Response) *fault.Error {
	e := &fault.Error{Kind: fault.Provider, ProviderStatus: r.Status}
	switch r.Status {
	case http.StatusUnauthorized:
		e.Code = CodeCredentialRejected
		e.Message = provider + " rejected the bound credential; an admin must replace it"
	case http.StatusForbidden:
		e.Code = CodeCredentialForbidden
		e.Message = provider + " refused the bound credential the permission for this call"
	case http.StatusTooManyRequests:
		e.Code, e.Kind = CodeRateLimited, fault.RateLimited
		e.Message = provider + " rate-limited the call" + retryAfter(r.Header)
	default:
		e.Code = runner.CodeProviderError
		e.Message = fmt.Sprintf("%s answered HTTP %d", provider, r.Status)
	}
	return e
}

// ClientFailure is a typed error for a provider answer that is the caller's to fix (a
// missing branch, an existing change request): kind is what the caller gets.
func ClientFailure(r *Response, kind fault.Kind, code, message string) *fault.Error {
	return &fault.Error{Kind: kind, Code: code, Message: message, ProviderStatus: r.Status}
}

func retryAfter(h http.Header) string {
	if v := strings.TrimSpace(h.Get("Retry-After")); v != "" {
		return "; retry after " + v + "s"
	}
	return ""
}

// OK reports a 2xx status.
func (r *Response) OK() bool { return r.Status >= 200 && r.Status < 300 }

// Join appends path to a base URL without doubling slashes.
func Join(base, path string) string {
	return strings.TrimRight(base, "/") + path
}
