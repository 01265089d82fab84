package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/xemahq/xema/internal/store"
)

// testDeploymentKeys: the first candidate stored wins, for every later and concurrent caller.
func testDeploymentKeys(t *testing.T, s store.Store) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		key       string
		candidate []byte
	}{
		{"empty name", "", []byte("x")},
		{"empty candidate", "cursor", nil},
	} {
		if _, err := s.DeploymentKey(ctx, tc.key, tc.candidate); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s: DeploymentKey = %v, want ErrInvalid", tc.name, err)
		}
	}
	first, err := s.DeploymentKey(ctx, "cursor", []byte("first-secret"))
	if err != nil {
		t.Fatalf("DeploymentKey: %v", err)
	}
	if string(first) != "first-secret" {
		t.Fatalf("first DeploymentKey = %q, want the candidate", first)
	}
	again, err := s.DeploymentKey(ctx, "cursor", []byte("second-secret"))
	if err != nil || !bytes.Equal(again, first) {
		t.Fatalf("second DeploymentKey = %q, %v; want the stored %q", again, err, first)
	}
	other, err := s.DeploymentKey(ctx, "input-hash", []byte("other"))
	if err != nil || string(other) != "other" {
		t.Fatalf("another name = %q, %v; want its own candidate", other, err)
	}

	// Replicas racing on first start all end with one key.
	const n = 8
	got := make([][]byte, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = s.DeploymentKey(ctx, "race", []byte(fmt.Sprintf("candidate-%d", i)))
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("concurrent DeploymentKey %d: %v", i, errs[i])
		}
		if !bytes.Equal(got[i], got[0]) {
			t.Fatalf("concurrent callers disagree: %q and %q", got[i], got[0])
		}
	}
}
