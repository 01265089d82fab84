package approval

import (
	"testing"

	"github.com/xemahq/xema/internal/policy"
)

func TestDenialCode(t *testing.T) {
	reasons := func(codes ...string) []policy.Reason {
		rs := make([]policy.Reason, len(codes))
		for i, c := range codes {
			rs[i] = policy.Reason{Code: c, Detail: "d"}
		}
		return rs
	}
	cases := []struct {
		name    string
		reasons []policy.Reason
		want    string
	}{
		{"not covered", reasons("MISSING_GRANT"), CodeNotApprover},
		{"own approval wins over the grant", reasons("MISSING_GRANT", "OWN_APPROVAL"), CodeOwnApproval},
		{"not a person", reasons("APPROVER_NOT_HUMAN", "SUBJECT_NOT_COVERED"), CodeApproverNotHuman},
		{"own approval before not a person", reasons("APPROVER_NOT_HUMAN", "OWN_APPROVAL"), CodeOwnApproval},
		{"no reasons", nil, CodeNotApprover},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := denialCode(tc.reasons); got != tc.want {
				t.Fatalf("denialCode = %s, want %s", got, tc.want)
			}
		})
	}
}
