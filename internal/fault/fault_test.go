package fault

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
)

// TestKindNames: every kind has its own name and parses back from it; an unknown name is no
// kind, and an out-of-range kind names its number instead of passing for another.
func TestKindNames(t *testing.T) {
	seen := map[string]Kind{}
	for k := Internal; k <= Timeout; k++ {
		name := k.String()
		if prev, dup := seen[name]; dup {
			t.Fatalf("kinds %d and %d share the name %q", prev, k, name)
		}
		seen[name] = k
		if got, ok := ParseKind(name); !ok || got != k {
			t.Errorf("ParseKind(%q) = %v, %v; want %v", name, got, ok, k)
		}
	}
	if k, ok := ParseKind("bogus"); ok || k != Internal {
		t.Errorf("ParseKind(bogus) = %v, %v; want Internal, false", k, ok)
	}
	if got := Kind(200).String(); got != "kind(200)" {
		t.Errorf("Kind(200) = %q", got)
	}
}

// TestOf: a domain error, wrapped however deep, is itself; anything else is the opaque
// internal error, whose text never reaches the caller.
func TestOf(t *testing.T) {
	inner := New(Conflict, "ALREADY", "already %s", "there")
	for name, tc := range map[string]struct {
		err  error
		want *Error
	}{
		"itself":  {inner, inner},
		"wrapped": {fmt.Errorf("ctx: %w", fmt.Errorf("more: %w", inner)), inner},
	} {
		if got := Of(tc.err); got != tc.want {
			t.Errorf("%s: Of = %+v, want the same error", name, got)
		}
	}
	secret := errors.New("dial tcp 10.0.0.7:5432: password authentication failed for user xema")
	got := Of(secret)
	if got.Kind != Internal || got.Code != CodeInternal || got.Message != "internal error" {
		t.Fatalf("Of(plain error) = %+v", got)
	}
	body, _ := json.Marshal(got)
	if string(body) != `{"code":"INTERNAL","message":"internal error"}` {
		t.Fatalf("the internal error's body tells more: %s", body)
	}
}

// TestWrapKeepsTheCauseForTheLogOnly: Wrap's underlying error is reachable with errors.Is
// and never encoded into the body.
func TestWrapKeepsTheCauseForTheLogOnly(t *testing.T) {
	cause := errors.New("the store said no: constraint xyz")
	e := Wrap(cause, Unavailable, CodeStoreUnavailable, "the store is unavailable")
	if !errors.Is(e, cause) || e.Kind != Unavailable {
		t.Fatalf("Wrap lost its cause or kind: %+v", e)
	}
	if e.Error() != "STORE_UNAVAILABLE: the store is unavailable" {
		t.Fatalf("Error() = %q", e.Error())
	}
	body, _ := json.Marshal(e)
	if string(body) != `{"code":"STORE_UNAVAILABLE","message":"the store is unavailable"}` {
		t.Fatalf("body %s", body)
	}
}

// TestNotRunIsNeverAnswered: whether a call ran is the gateway's to act on (an idempotency
// key's release), not part of the answer; and an error that never said so may have run.
func TestNotRunIsNeverAnswered(t *testing.T) {
	e := New(Unavailable, CodeStoreUnavailable, "the store is unavailable")
	if e.NotRun {
		t.Fatal("a new error says it did not run: only the funnel or a runner may say so")
	}
	e.NotRun = true
	body, _ := json.Marshal(e)
	if string(body) != `{"code":"STORE_UNAVAILABLE","message":"the store is unavailable"}` {
		t.Fatalf("body %s", body)
	}
}
