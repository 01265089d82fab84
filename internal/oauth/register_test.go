package oauth

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/xemahq/xema/internal/identity/hydratest"
	"github.com/xemahq/xema/internal/secretbox"
)

func compileSchema(t *testing.T, name string) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	s, err := c.Compile(filepath.Join("..", "..", "schemas", name))
	if err != nil {
		t.Fatalf("schema %s: %v", name, err)
	}
	return s
}

func validateJSON(t *testing.T, s *jsonschema.Schema, b []byte) error {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return err
	}
	return s.Validate(v)
}

func keyring(t *testing.T) *secretbox.Keyring {
	t.Helper()
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	kr, err := secretbox.Parse("k1=" + base64.StdEncoding.EncodeToString(k))
	if err != nil {
		t.Fatal(err)
	}
	return kr
}

// identityService stands in for Xema's identity service, which cannot run here. It follows
// schemas/identity-registration.*.json: each request must be valid under the request schema,
// and answer (checked by the caller against the response schema) is what it returns.
func identityService(t *testing.T, bootstrapToken string, answer []byte) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	reqSchema := compileSchema(t, "identity-registration.request.json")
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.Method != http.MethodPost || r.URL.Path != RegistrationPath || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		if r.Header.Get("Authorization") != "Bearer "+bootstrapToken {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"unauthorized","client_secret":"must-not-be-echoed"}`))
			return
		}
		body, _ := io.ReadAll(r.Body)
		if err := validateJSON(t, reqSchema, body); err != nil {
			t.Errorf("registration request violates its schema: %v\n%s", err, body)
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(answer)
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

func TestBootstrapRegistersOnceAndMintsFromHydra(t *testing.T) {
	h := hydratest.Start(t)
	client := h.CreateClient(t, "xema")
	answer, _ := json.Marshal(map[string]any{
		"client_id": client.ID, "client_secret": client.Secret, "token_endpoint": h.TokenURL(),
		"expires_at": "ignored-extra-field",
	})
	if err := validateJSON(t, compileSchema(t, "identity-registration.response.json"), answer); err != nil {
		t.Fatalf("the stand-in's answer must follow the response schema: %v", err)
	}
	const bootstrapToken = "one-time-bootstrap-9c1e"
	idp, calls := identityService(t, bootstrapToken, answer)
	dataDir := t.TempDir()
	kr := keyring(t)
	cfg := BootstrapConfig{IdentityURL: idp.URL, BootstrapToken: bootstrapToken, DataDir: dataDir, Keyring: kr,
		Request: RegistrationRequest{Instance: "eu-1"}}

	reg, err := Bootstrap(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if reg.ClientID != client.ID || reg.ClientSecret != client.Secret || calls.Load() != 1 {
		t.Fatalf("registration %v, calls %d", reg, calls.Load())
	}
	if printed := fmt.Sprintf("%v %+v %#v %s", reg, reg, reg, reg); strings.Contains(printed, client.Secret) {
		t.Fatal("printing a registration leaks the secret")
	}
	file := RegistrationFile(dataDir)
	fi, err := os.Stat(file)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("registration file: %v %v", fi, err)
	}
	stored, _ := os.ReadFile(file)
	if bytes.Contains(stored, []byte(client.Secret)) || bytes.Contains(stored, []byte(bootstrapToken)) || !bytes.Contains(stored, []byte(`"client_secret_sealed": "sb1.k1.`)) {
		t.Fatalf("stored registration must hold the secret only sealed:\n%s", stored)
	}

	// The registered credentials work against the real token endpoint.
	ts, err := reg.TokenSource()
	if err != nil {
		t.Fatal(err)
	}
	ts.cfg.Audience = "xema"
	if tok, err := ts.Token(t.Context()); err != nil || tok == "" {
		t.Fatalf("token with the registered client: %v", err)
	}

	// A restart reuses the stored registration: no second call, even with the identity
	// service gone and no bootstrap secret.
	idp.Close()
	again, err := Bootstrap(t.Context(), BootstrapConfig{DataDir: dataDir, Keyring: kr})
	if err != nil || again != reg || calls.Load() != 1 {
		t.Fatalf("restart: %v %v calls=%d", again, err, calls.Load())
	}
	// Under another key the stored secret does not open: an error, not a re-registration.
	if _, err := Bootstrap(t.Context(), BootstrapConfig{DataDir: dataDir, Keyring: keyring(t)}); !errors.Is(err, secretbox.ErrOpen) {
		t.Fatalf("foreign keyring: %v", err)
	}
}

func TestBootstrapRejects(t *testing.T) {
	const bootstrapToken = "one-time-bootstrap-9c1e"
	respSchema := compileSchema(t, "identity-registration.response.json")
	for name, tc := range map[string]struct {
		answer string
		token  string
		want   string
	}{
		"wrong bootstrap secret":      {`{}`, "wrong", "answered 401"},
		"no client secret":            {`{"client_id":"c","token_endpoint":"https://idp.test/token"}`, bootstrapToken, "client_secret is missing"},
		"no client id":                {`{"client_secret":"s","token_endpoint":"https://idp.test/token"}`, bootstrapToken, "client_id is missing"},
		"plain http to a remote host": {`{"client_id":"c","client_secret":"s","token_endpoint":"http://idp.test/token"}`, bootstrapToken, "token_endpoint"},
		"not JSON":                    {`<html>`, bootstrapToken, "not the documented JSON"},
	} {
		t.Run(name, func(t *testing.T) {
			if tc.token == bootstrapToken && validateJSON(t, respSchema, []byte(tc.answer)) == nil {
				t.Fatalf("the response schema must reject this answer too: %s", tc.answer)
			}
			idp, _ := identityService(t, bootstrapToken, []byte(tc.answer))
			dataDir := t.TempDir()
			_, err := Bootstrap(t.Context(), BootstrapConfig{IdentityURL: idp.URL, BootstrapToken: tc.token, DataDir: dataDir, Keyring: keyring(t)})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want error mentioning %q, got %v", tc.want, err)
			}
			if strings.Contains(err.Error(), "must-not-be-echoed") || strings.Contains(err.Error(), tc.token) {
				t.Fatal("error echoes the answer body or the bootstrap secret")
			}
			if _, statErr := os.Stat(RegistrationFile(dataDir)); !os.IsNotExist(statErr) {
				t.Fatal("a failed registration left a file behind")
			}
		})
	}
	if _, err := Bootstrap(context.Background(), BootstrapConfig{DataDir: t.TempDir(), Keyring: keyring(t)}); err == nil {
		t.Fatal("no stored registration and nothing to register with must fail")
	}
	if _, err := Bootstrap(context.Background(), BootstrapConfig{DataDir: t.TempDir()}); err == nil {
		t.Fatal("no keyring must fail")
	}
}
