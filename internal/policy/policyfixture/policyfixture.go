// Package policyfixture reads internal/policy's decision fixture (testdata/data.json:
// environments, audience, profiles, org roles, capabilities and grants in the contract's
// layout) for the tests and benchmarks of other packages.
package policyfixture

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// Data is a fresh copy of the fixture.
func Data(tb testing.TB) map[string]any {
	tb.Helper()
	_, self, _, _ := runtime.Caller(0)
	raw, err := os.ReadFile(filepath.Join(filepath.Dir(self), "..", "testdata", "data.json"))
	if err != nil {
		tb.Fatal(err)
	}
	var data map[string]any
	if err := json.Unmarshal(raw, &data); err != nil {
		tb.Fatal(err)
	}
	return data
}
