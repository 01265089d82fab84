// Package client is the Shell's HTTP client of a running gateway: JSON in, JSON out, typed
// errors decoded from the gateway's `{code, message}` answers.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Client talks to one gateway with one bearer token.
type Client struct {
	Server string
	Token  string
	HTTP   *http.Client
}

// New checks the server URL and returns a client.
func New(server, token string) (*Client, error) {
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--server %q: want an http(s) URL such as http://127.0.0.1:8181", server)
	}
	if token == "" {
		return nil, fmt.Errorf("--token (or XEMA_TOKEN) is required")
	}
	return &Client{Server: strings.TrimRight(server, "/"), Token: token, HTTP: &http.Client{Timeout: 30 * time.Second}}, nil
}

// APIError is a non-2xx answer of the gateway: its code and message, the audit record of
// the refused call, every problem it named with its JSON pointer and a denial's reasons.
type APIError struct {
	Status         int
	Code           string          `json:"code"`
	Message        string          `json:"message"`
	AuditID        string          `json:"auditId,omitempty"`
	Violations     []Violation     `json:"violations,omitempty"`
	ViolationCount int             `json:"violationCount,omitempty"`
	Reasons        []Reason        `json:"reasons,omitempty"`
	Suggestions    json.RawMessage `json:"suggestions,omitempty"`
	Body           json.RawMessage `json:"-"`
}

// Violation is one problem the gateway named: an RFC 6901 pointer and a message.
type Violation struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

// Reason is one reason code of a denial.
type Reason struct {
	Code   string `json:"code"`
	Detail string `json:"detail"`
}

// Error is the code, status and message, then the audit id and, one per line, each problem
// ("  POINTER: MESSAGE") and each reason of a denial ("  reason CODE: DETAIL").
func (e *APIError) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("gateway answered HTTP %d", e.Status)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s (HTTP %d): %s", e.Code, e.Status, e.Message)
	if e.AuditID != "" {
		fmt.Fprintf(&b, " (auditId %s)", e.AuditID)
	}
	for _, v := range e.Violations {
		path := v.Path
		if path == "" {
			path = "/"
		}
		fmt.Fprintf(&b, "\n  %s: %s", path, v.Message)
	}
	if more := e.ViolationCount - len(e.Violations); more > 0 {
		fmt.Fprintf(&b, "\n  ... and %d more problem(s)", more)
	}
	for _, r := range e.Reasons {
		fmt.Fprintf(&b, "\n  reason %s: %s", r.Code, r.Detail)
	}
	return b.String()
}

// Do sends method path with body (nil for none) and decodes a 2xx answer into out.
func (c *Client) Do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Server+path, rd)
	if err != nil {
		return fmt.Errorf("request %s: %w", path, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("read answer of %s: %w", path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		ae := &APIError{Status: resp.StatusCode, Body: raw}
		_ = json.Unmarshal(raw, ae)
		return ae
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("decode answer of %s: %w", path, err)
	}
	return nil
}
