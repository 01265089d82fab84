package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "xema.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// sampleValue is a valid YAML value for a flag of type typ.
func sampleValue(f *pflag.Flag) string {
	switch f.Value.Type() {
	case "bool":
		return "true"
	case "duration":
		return "3s"
	case "int":
		return "7"
	case "stringArray", "stringSlice":
		return "[one, two]"
	}
	return "value-of-" + f.Name
}

// TestConfigCoversEveryServeFlag: every flag of xema serve can be set from the file (the
// file is keyed by flag name, so a flag added later is covered without touching the loader).
func TestConfigCoversEveryServeFlag(t *testing.T) {
	cmd := newServeCmd()
	var body strings.Builder
	n := 0
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Name == "config" {
			return
		}
		fmt.Fprintf(&body, "%s: %s\n", f.Name, sampleValue(f))
		n++
	})
	if n < 30 {
		t.Fatalf("only %d serve flags found", n)
	}
	if err := applyConfig(cmd.Flags(), writeConfig(t, body.String())); err != nil {
		t.Fatal(err)
	}
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Name == "config" {
			return
		}
		want := strings.Trim(sampleValue(f), "[]")
		got := f.Value.String()
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			got = strings.Join(sv.GetSlice(), ", ")
		}
		if f.Value.Type() == "duration" {
			want = "3s"
		}
		if !f.Changed || got != want {
			t.Errorf("%s: %q (changed %v), want %q", f.Name, got, f.Changed, want)
		}
	})
}

func TestConfigPrecedenceAndExpansion(t *testing.T) {
	t.Setenv("XEMA_TEST_DSN", "postgres://db/xema")
	t.Setenv("XEMA_TEST_EMPTY", "")
	cases := []struct {
		name   string
		args   []string
		config string
		flag   string
		want   string
		err    string
	}{
		{"file sets", nil, "addr: 0.0.0.0:9000\n", "addr", "0.0.0.0:9000", ""},
		{"flag overrides file", []string{"--addr", "127.0.0.1:1"}, "addr: 0.0.0.0:9000\n", "addr", "127.0.0.1:1", ""},
		{"env expands", nil, "store: ${XEMA_TEST_DSN}\n", "store", "postgres://db/xema", ""},
		{"env inside a value", nil, "public-url: https://${XEMA_TEST_HOST:-xema.example}/\n", "public-url", "https://xema.example/", ""},
		{"empty env takes the default", nil, "audience: ${XEMA_TEST_EMPTY:-xema}\n", "audience", "xema", ""},
		{"lone dollar kept", nil, "audience: a$b\n", "audience", "a$b", ""},
		{"list for a repeatable flag", nil, "cors-origin: [https://a.example, https://b.example]\n", "cors-origin", "[https://a.example,https://b.example]", ""},
		{"scalar for a repeatable flag", nil, "egress-allow: 10.0.0.0/8\n", "egress-allow", "[10.0.0.0/8]", ""},
		{"flag list overrides file list", []string{"--cors-origin", "https://c.example"}, "cors-origin: [https://a.example]\n", "cors-origin", "[https://c.example]", ""},
		{"unset env refused", nil, "store: ${XEMA_TEST_UNSET_VAR}\n", "", "", "XEMA_TEST_UNSET_VAR is not set"},
		{"unknown key refused", nil, "adress: x\n", "", "", "adress: not a flag"}, //nolint:misspell // a misspelt key is the case under test
		{"config in config refused", nil, "config: other.yaml\n", "", "", "config: not a flag"},
		{"list for a single flag refused", nil, "addr: [a, b]\n", "", "", "not a list"},
		{"bad duration refused", nil, "reload-every: soon\n", "", "", "reload-every"},
		{"not a mapping", nil, "- addr\n", "", "", "cannot unmarshal"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmd := newServeCmd()
			if err := cmd.Flags().Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := applyConfig(cmd.Flags(), writeConfig(t, tc.config))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := cmd.Flags().Lookup(tc.flag).Value.String(); got != tc.want {
				t.Errorf("%s = %q, want %q", tc.flag, got, tc.want)
			}
		})
	}
}

func TestSetupLoggingLevel(t *testing.T) {
	for lvl, ok := range map[string]bool{"debug": true, "info": true, "warn": true, "error": true, "DEBUG": true, "loud": false} {
		if err := setupLogging(false, lvl); (err == nil) != ok {
			t.Errorf("--log-level %s: %v", lvl, err)
		}
	}
	_ = setupLogging(false, "info")
}

func TestTLSFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		web  webFlags
		err  string
	}{
		{"none", webFlags{}, ""},
		{"missing files", webFlags{tlsCert: "/nonexistent/c.pem", tlsKey: "/nonexistent/k.pem"}, "--tls-cert/--tls-key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := tc.web.tlsConfig()
			if tc.err == "" && (err != nil || cfg != nil) || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("tlsConfig: %v %v, want %q", cfg, err, tc.err)
			}
		})
	}
}
