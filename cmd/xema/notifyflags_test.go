package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xemahq/xema/internal/secretbox"
)

// TestWebhookSecretFileModes: a webhook secret file group or others may read is refused as a
// master key file is (whoever reads it forges events), naming the file, whether given by
// --approval-webhook-secret-file or by a webhook of the config file; 0600 is read.
func TestWebhookSecretFileModes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "webhook.secret")
	if err := os.WriteFile(path, []byte("0123456789abcdef-webhook-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	flags := map[string]func() *notifyFlags{
		"flag": func() *notifyFlags {
			n := &notifyFlags{secretFile: path}
			n.webhooks.items = []webhookSpec{{URL: "https://hooks.example/x"}}
			return n
		},
		"config file": func() *notifyFlags {
			n := &notifyFlags{}
			n.webhooks.items = []webhookSpec{{URL: "https://hooks.example/x", SecretFile: path}}
			return n
		},
	}
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o600} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		for name, n := range flags {
			cfg, err := n().config("", "127.0.0.1:8080", false)
			switch {
			case mode == 0o600 && (err != nil || len(cfg.Webhooks) != 1 || string(cfg.Webhooks[0].Secret) != "0123456789abcdef-webhook-secret"):
				t.Errorf("%s at 0600: %+v, %v; want the secret read", name, cfg.Webhooks, err)
			case mode != 0o600 && (!errors.Is(err, secretbox.ErrBadKey) || !strings.Contains(err.Error(), path) || cfg.Webhooks != nil):
				t.Errorf("%s at %04o: %v; want refused naming the file", name, mode, err)
			}
		}
	}
}
