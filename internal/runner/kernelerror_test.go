package runner

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/kernel"
)

// TestKernelErrorTextIsNotAnswered: an untyped handler error is kept for the log (Err) and
// replaced by a fixed message; a fault.Error a handler wrote for its caller is kept as is.
func TestKernelErrorTextIsNotAnswered(t *testing.T) {
	internal := errors.New("open /var/lib/xema/credential.key: permission denied; dial tcp 10.0.0.7:5432")
	for _, tc := range []struct {
		name    string
		err     error
		code    string
		message string
	}{
		{"untyped Go error", internal, CodeHandlerFailed, MessageHandlerFailed},
		{"wrapped Go error", errors.Join(errors.New("publish"), internal), CodeHandlerFailed, MessageHandlerFailed},
		{"typed client error", fault.New(fault.Conflict, "CONFLICT", "biome %s exists", "acme"), "CONFLICT", "biome acme exists"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := Kernel{Handler: func(context.Context, kernel.Call) (any, error) { return nil, tc.err }}
			_, err := k.Run(context.Background(), kernel.Call{Ref: "x:y@1"})
			var re *fault.Error
			if !errors.As(err, &re) {
				t.Fatalf("Run = %v, want a *fault.Error", err)
			}
			if re.Code != tc.code || re.Message != tc.message {
				t.Fatalf("Run = %s / %q, want %s / %q", re.Code, re.Message, tc.code, tc.message)
			}
			if strings.Contains(re.Message, "10.0.0.7") || strings.Contains(re.Message, "credential.key") {
				t.Fatalf("internal error text in the message: %q", re.Message)
			}
			if tc.code == CodeHandlerFailed && !errors.Is(err, internal) {
				t.Fatal("the internal error is not kept for the log")
			}
		})
	}
}
