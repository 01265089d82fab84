package gateway

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/inputschema"
)

func TestViolationsAreCapped(t *testing.T) {
	many := func(n int) []inputschema.Violation {
		vs := make([]inputschema.Violation, n)
		for i := range vs {
			vs[i] = inputschema.Violation{Path: fmt.Sprintf("/p%d", i), Message: "unknown property"}
		}
		return vs
	}
	for _, tc := range []struct {
		name  string
		err   *fault.Error
		total int
	}{
		{"invalid input, 90000", invalidInput(many(90_000)), 90_000},
		{"invalid input, 3", invalidInput(many(3)), 3},
		{"handler client error, 250", providerError(&fault.Error{Kind: fault.Invalid, Code: "X", Violations: many(250)}), 250},
		{"exactly the maximum", providerError(&fault.Error{Kind: fault.Invalid, Code: "X", Violations: many(MaxViolations)}), MaxViolations},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := json.Marshal(tc.err)
			if err != nil {
				t.Fatal(err)
			}
			var body struct {
				Violations     []inputschema.Violation `json:"violations"`
				ViolationCount int                     `json:"violationCount"`
			}
			if err := json.Unmarshal(raw, &body); err != nil {
				t.Fatal(err)
			}
			if want := min(tc.total, MaxViolations); len(body.Violations) != want || body.ViolationCount != tc.total {
				t.Fatalf("violations %d count %d, want %d and %d", len(body.Violations), body.ViolationCount, want, tc.total)
			}
		})
	}
}
