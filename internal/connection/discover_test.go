package connection

import (
	"net/url"
	"slices"
	"testing"
)

func TestAuthServerMetadataURLs(t *testing.T) {
	for _, c := range []struct {
		issuer string
		want   []string
	}{
		{"https://as.example", []string{"https://as.example/.well-known/oauth-authorization-server",
			"https://as.example/.well-known/openid-configuration"}},
		// hydra's issuer: a trailing slash is no path.
		{"http://127.0.0.1:4444/", []string{"http://127.0.0.1:4444/.well-known/oauth-authorization-server",
			"http://127.0.0.1:4444/.well-known/openid-configuration"}},
		{"https://as.example/tenant/", []string{"https://as.example/.well-known/oauth-authorization-server/tenant",
			"https://as.example/.well-known/openid-configuration/tenant", "https://as.example/tenant/.well-known/openid-configuration"}},
	} {
		got, err := authServerMetadataURLs(c.issuer)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, %v; want %v", c.issuer, got, err, c.want)
		}
	}
	if _, err := authServerMetadataURLs("/relative"); err == nil {
		t.Error("a relative issuer was taken")
	}
}

func TestWellKnownResourceURLs(t *testing.T) {
	for _, c := range []struct {
		url  string
		want []string
	}{
		{"https://mcp.example/mcp", []string{"https://mcp.example/.well-known/oauth-protected-resource/mcp",
			"https://mcp.example/.well-known/oauth-protected-resource"}},
		{"https://mcp.example/", []string{"https://mcp.example/.well-known/oauth-protected-resource"}},
		{"http://127.0.0.1:9/a/b/", []string{"http://127.0.0.1:9/.well-known/oauth-protected-resource/a/b",
			"http://127.0.0.1:9/.well-known/oauth-protected-resource"}},
	} {
		u := mustParse(t, c.url)
		if got := wellKnownResourceURLs(u); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.url, got, c.want)
		}
	}
}

func TestHTTPSOrLoopback(t *testing.T) {
	for _, c := range []struct {
		url string
		ok  bool
	}{
		{"", true},
		{"https://as.example/token", true},
		{"http://127.0.0.1:4444/token", true},
		{"http://localhost/token", true},
		{"http://[::1]:80/token", true},
		{"http://as.example/token", false},
		{"http://10.0.0.1/token", false},
		{"ftp://as.example/token", false},
		{"/token", false},
	} {
		if got := httpsOrLoopback(c.url) == ""; got != c.ok {
			t.Errorf("%q: ok %v, want %v", c.url, got, c.ok)
		}
	}
}

func TestPrintable(t *testing.T) {
	for _, c := range []struct {
		in   string
		max  int
		want string
	}{
		{"access_denied", 64, "access_denied"},
		{"a\"b\\c\nd\x00e", 64, "abcde"},
		{"ünïcode", 64, "ncode"},
		{"0123456789", 5, "01234..."},
	} {
		if got := printable(c.in, c.max); got != c.want {
			t.Errorf("%q: %q, want %q", c.in, got, c.want)
		}
	}
}

func mustParse(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
