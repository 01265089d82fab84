package grant

import (
	"reflect"
	"strings"
	"testing"
)

func TestBuiltinProfiles(t *testing.T) {
	ps := Builtin()
	want := []string{"connector-bridge", "internal-agent", "read-only-assistant", "support-chatbot", "unrestricted"}
	if !reflect.DeepEqual(ps.Names(), want) {
		t.Fatalf("profiles = %v", ps.Names())
	}
	tests := []struct {
		profile, effect, risk string
		admits, approval      bool
	}{
		{"read-only-assistant", "read", "medium", true, false},
		{"read-only-assistant", "read", "high", false, false},
		{"read-only-assistant", "write", "low", false, false},
		{"support-chatbot", "write", "low", true, true},
		{"support-chatbot", "read", "medium", false, false},
		{"internal-agent", "write", "high", true, true},
		{"internal-agent", "write", "critical", false, true},
		{"internal-agent", "admin", "low", false, false},
		{"connector-bridge", "write", "critical", true, true},
		{"connector-bridge", "admin", "low", false, false},
		{"unrestricted", "admin", "critical", true, false},
	}
	for _, tt := range tests {
		p := ps[tt.profile]
		if got := p.Admits(tt.effect, tt.risk); got != tt.admits {
			t.Errorf("%s admits %s/%s = %v", tt.profile, tt.effect, tt.risk, got)
		}
		if got := p.NeedsApproval(tt.effect, tt.risk); got != tt.approval {
			t.Errorf("%s approval for %s/%s = %v", tt.profile, tt.effect, tt.risk, got)
		}
	}
	if !reflect.DeepEqual(ps["unrestricted"].EnvironmentKinds, Kinds) {
		t.Errorf("unrestricted kinds = %v, want all", ps["unrestricted"].EnvironmentKinds)
	}
}

func TestParseProfilesRejectsBadData(t *testing.T) {
	good := `"effectClasses":["read"],"riskTiers":["low"],"environmentKinds":["app"],"rateLimit":{"requests":1,"per":"1m"},"quota":{"requests":1,"per":"24h"},"approval":{"effectClasses":[],"riskTiers":[]}`
	for _, tt := range []struct{ data, want string }{
		{`{"p":{` + good + `,"extra":1}}`, "unknown field"},
		{`{"p":{` + strings.Replace(good, `["read"]`, `["delete"]`, 1) + `}}`, `unknown effect class "delete"`},
		{`{"p":{` + strings.Replace(good, `["low"]`, `["tiny"]`, 1) + `}}`, `unknown risk tier "tiny"`},
		{`{"p":{` + strings.Replace(good, `["app"]`, `["mars"]`, 1) + `}}`, `unknown environment kind "mars"`},
		{`{"p":{` + strings.Replace(good, `"requests":1,"per":"1m"`, `"requests":0,"per":"1m"`, 1) + `}}`, "rateLimit"},
	} {
		if _, err := parseProfiles([]byte(tt.data)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("parseProfiles: err = %v, want %q", err, tt.want)
		}
	}
}
