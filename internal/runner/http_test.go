package runner

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/egress"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/kernel"
)

type staticToken string

func (s staticToken) Token(context.Context, string) (string, error) { return string(s), nil }

type failingToken struct{}

func (failingToken) Token(context.Context, string) (string, error) {
	return "", errors.New("token endpoint down")
}

func TestHTTPRunner(t *testing.T) {
	var got struct {
		body    string
		headers http.Header
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.body, got.headers = string(b), r.Header.Clone()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"echo":true}`))
	})
	mux.HandleFunc("/500", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "boom", 500) })
	mux.HandleFunc("/html", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("<html>")) })
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(500 * time.Millisecond):
		}
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	call := kernel.Call{Ref: "acme:thing.do@1", Input: json.RawMessage(`{"a":1}`), AuditID: "inv_x"}
	tests := []struct {
		name     string
		path     string
		tokens   TokenSource
		timeout  time.Duration
		wantCode string
		wantOut  string
	}{
		{"2xx JSON is the output", "/ok", staticToken("svc-token"), 0, "", `{"echo":true}`},
		{"non-2xx is a provider error", "/500", staticToken("t"), 0, CodeProviderError, ""},
		{"non-JSON is a bad response", "/html", staticToken("t"), 0, CodeBadResponse, ""},
		{"timeout is typed", "/slow", staticToken("t"), 50 * time.Millisecond, CodeProviderTimeout, ""},
		{"no service token fails fast", "/ok", failingToken{}, 0, CodeNoToken, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := HTTP{Client: srv.Client(), URL: srv.URL + tc.path, Timeout: tc.timeout, Tokens: tc.tokens}
			out, err := r.Run(context.Background(), call)
			if tc.wantCode == "" {
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
				if string(out) != tc.wantOut {
					t.Fatalf("output %s, want %s", out, tc.wantOut)
				}
				return
			}
			var re *fault.Error
			if !errors.As(err, &re) || re.Code != tc.wantCode {
				t.Fatalf("error %v, want code %s", err, tc.wantCode)
			}
			if strings.Contains(re.Error(), "svc-token") {
				t.Fatalf("error leaks the token: %v", re)
			}
		})
	}
	if got.body != `{"a":1}` || got.headers.Get("X-Xema-Ref") != call.Ref ||
		got.headers.Get("X-Xema-Audit-Id") != "inv_x" || got.headers.Get("Authorization") != "Bearer svc-token" {
		t.Fatalf("provider saw body %q headers %v", got.body, got.headers)
	}
}

// TestHTTPRunnerEgress: through the egress client, a refused address dialled is a typed 502
// EGRESS_DENIED and a 307 a typed 502 PROVIDER_REDIRECT; the redirect target gets nothing;
// the token is minted for the provider's origin.
func TestHTTPRunnerEgress(t *testing.T) {
	var second int
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { second++ }))
	defer target.Close()
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL, http.StatusTemporaryRedirect)
	}))
	defer redirector.Close()
	call := kernel.Call{Ref: "acme:thing.do@1", Input: json.RawMessage(`{}`)}

	prod := egress.New(nil).Client(nil) // no loopback allowed
	_, err := HTTP{Client: prod, URL: redirector.URL, Tokens: staticToken("t")}.Run(context.Background(), call)
	var re *fault.Error
	if !errors.As(err, &re) || re.Code != CodeEgressDenied || re.Kind != fault.Provider {
		t.Fatalf("loopback under a production policy: %v", err)
	}
	dev := egress.New(egress.Loopback()).Client(nil)
	aud := &audienceToken{}
	_, err = HTTP{Client: dev, URL: redirector.URL + "/x", Tokens: aud}.Run(context.Background(), call)
	if !errors.As(err, &re) || re.Code != CodeRedirect || re.Kind != fault.Provider {
		t.Fatalf("redirect: %v", err)
	}
	if second != 0 {
		t.Fatal("the redirect was followed")
	}
	if aud.got != Audience(redirector.URL) || !strings.HasPrefix(aud.got, AudiencePrefix+"http://127.0.0.1:") {
		t.Fatalf("token audience %q", aud.got)
	}
}

type audienceToken struct{ got string }

func (a *audienceToken) Token(_ context.Context, audience string) (string, error) {
	a.got = audience
	return "t", nil
}

func TestAudience(t *testing.T) {
	for in, want := range map[string]string{
		"https://API.example.com:443/v1?x": "xema-provider:https://api.example.com",
		"http://127.0.0.1:8080/create":     "xema-provider:http://127.0.0.1:8080",
		"http://[::1]:80/":                 "xema-provider:http://[::1]",
		"not a url":                        "xema-provider:invalid",
	} {
		if got := Audience(in); got != want {
			t.Errorf("Audience(%q) = %q, want %q", in, got, want)
		}
	}
}

// A provider's error body reaches the caller as providerBody only when it is JSON or plain
// text, bounded and cut at a character, and never when it echoes the gateway's token.
// A provider called without a service token still has its error body passed on: an empty
// token is contained in every body, so it must not count as an echo.
func TestErrorBodyWithoutToken(t *testing.T) {
	if got, _ := errorBody("application/json", []byte(`{"error":"no such ticket"}`), ""); got != `{"error":"no such ticket"}` {
		t.Fatalf("errorBody without a token: %q", got)
	}
}

func TestHTTPRunnerErrorBody(t *testing.T) {
	long := strings.Repeat("a", MaxErrorBodyBytes-1) + "é" + "tail" // é straddles the bound
	cases := []struct {
		name, contentType, body string
		want                    string
		cut                     bool
	}{
		{"json", "application/json", `{"error":"no such ticket"}`, `{"error":"no such ticket"}`, false},
		{"problem json", "application/problem+json; charset=utf-8", `{"title":"gone"}`, `{"title":"gone"}`, false},
		{"plain text", "text/plain; charset=utf-8", "no such ticket", "no such ticket", false},
		{"html is not passed on", "text/html", "<h1>no</h1>", "", false},
		{"no content type", "", `{"error":"x"}`, "", false},
		{"bad content type", "application/json; =", `{"error":"x"}`, "", false},
		{"binary", "application/octet-stream", "\x00\x01", "", false},
		{"not utf-8", "text/plain", "caf\xe9", "", false},
		{"echoed token", "application/json", `{"authorization":"Bearer s3cret-token"}`, "", false},
		{"bounded at a character", "text/plain", long, strings.Repeat("a", MaxErrorBodyBytes-1), true},
		{"exactly the bound", "text/plain", strings.Repeat("b", MaxErrorBodyBytes), strings.Repeat("b", MaxErrorBodyBytes), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header()["Content-Type"] = []string{tc.contentType}
				w.Header().Set("X-Secret", "header-value")
				w.WriteHeader(http.StatusNotFound)
				_, _ = io.WriteString(w, tc.body)
			}))
			defer srv.Close()
			_, err := HTTP{Client: srv.Client(), URL: srv.URL, Tokens: staticToken("s3cret-token")}.Run(context.Background(), kernel.Call{Input: json.RawMessage(`{}`)})
			var fe *fault.Error
			if !errors.As(err, &fe) || fe.Code != CodeProviderError || fe.ProviderStatus != http.StatusNotFound {
				t.Fatalf("err = %v, want PROVIDER_ERROR 404", err)
			}
			if fe.ProviderBody != tc.want || fe.ProviderBodyTruncated != tc.cut {
				t.Fatalf("providerBody = %q (truncated %v), want %q (truncated %v)", fe.ProviderBody, fe.ProviderBodyTruncated, tc.want, tc.cut)
			}
			raw, _ := json.Marshal(fe)
			if strings.Contains(string(raw), "header-value") || strings.Contains(string(raw), "s3cret-token") {
				t.Fatalf("answer %s carries a header or the token", raw)
			}
		})
	}
}
