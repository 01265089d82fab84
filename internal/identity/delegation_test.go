package identity

import (
	"slices"
	"strings"
	"testing"
)

func TestDelegatedClaims(t *testing.T) {
	base := func(extra map[string]any) map[string]any {
		c := map[string]any{"sub": "user:ann", ClaimEnvironment: "project", ClaimOrgRole: "org_admin",
			ClaimGroups: []any{"support"}, ClaimRoles: []any{"reader"}}
		for k, v := range extra {
			c[k] = v
		}
		return c
	}
	m := DevIssuerMapping()
	cases := []struct {
		name    string
		claims  map[string]any
		actors  []string
		mayAct  []string
		wantErr string
	}{
		{"no act", base(nil), nil, nil, ""},
		{"one actor", base(map[string]any{"act": map[string]any{"sub": "agent:bot"}}), []string{"agent:bot"}, nil, ""},
		{"a chain", base(map[string]any{"act": map[string]any{"sub": "agent:bot", "act": map[string]any{"sub": "workflow:w"}}}),
			[]string{"agent:bot", "workflow:w"}, nil, ""},
		{"a client id", base(map[string]any{"act": map[string]any{"sub": "client-42"}}), []string{"agent:client-42"}, nil, ""},
		{"may_act object", base(map[string]any{"act": map[string]any{"sub": "agent:bot"}, "may_act": map[string]any{"sub": "agent:bot"}}),
			[]string{"agent:bot"}, []string{"agent:bot"}, ""},
		{"may_act list", base(map[string]any{"act": map[string]any{"sub": "agent:bot"}, "may_act": []any{map[string]any{"sub": "agent:a"}, map[string]any{"sub": "agent:b"}}}),
			[]string{"agent:bot"}, []string{"agent:a", "agent:b"}, ""},
		{"act not an object", base(map[string]any{"act": "agent:bot"}), nil, nil, "is not an object"},
		{"act without sub", base(map[string]any{"act": map[string]any{"iss": "x"}}), nil, nil, "sub must be"},
		{"actor is the subject", base(map[string]any{"act": map[string]any{"sub": "user:ann"}}), nil, nil, "own subject"},
		{"actor twice", base(map[string]any{"act": map[string]any{"sub": "agent:a", "act": map[string]any{"sub": "agent:a"}}}), nil, nil, "twice"},
		{"too deep", base(map[string]any{"act": deepAct(MaxActDepth + 1)}), nil, nil, "deeper than"},
		{"an agent acted for", map[string]any{"sub": "agent:x", ClaimEnvironment: "project", "act": map[string]any{"sub": "agent:bot"}}, nil, nil, "only a person"},
		{"may_act not an object", base(map[string]any{"act": map[string]any{"sub": "agent:bot"}, "may_act": "agent:bot"}), nil, nil, "may_act"},
		{"control character", base(map[string]any{"act": map[string]any{"sub": "agent:b\x1bot"}}), nil, nil, "control"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ec, err := m.Map(tc.claims)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.actors == nil {
				if ec.Delegation != nil || ec.Subject.Ref != "user:ann" || ec.OrgRole != "org_admin" {
					t.Fatalf("undelegated token mapped to %+v", ec)
				}
				return
			}
			d := ec.Delegation
			if d == nil || !slices.Equal(d.Actors, tc.actors) || !slices.Equal(d.MayAct, tc.mayAct) {
				t.Fatalf("delegation %+v, want actors %v mayAct %v", d, tc.actors, tc.mayAct)
			}
			// The caller is the actor, holding none of the person's standing.
			if ec.Subject.Ref != tc.actors[0] || ec.OrgRole != "" || len(ec.Groups) != 0 || len(ec.Roles) != 0 || ec.OrgAdmin() {
				t.Errorf("caller %+v: the actor must hold no org role, group or role", ec)
			}
			if d.Person.Ref != "user:ann" || d.OrgRole != "org_admin" || !slices.Equal(d.Groups, []string{"support"}) {
				t.Errorf("person %+v, want user:ann with the token's standing", d)
			}
			if ec.Principal().Ref != "user:ann" {
				t.Errorf("principal %v", ec.Principal())
			}
		})
	}
}

func deepAct(n int) map[string]any {
	act := map[string]any{"sub": "agent:a0"}
	for i := 1; i < n; i++ {
		act = map[string]any{"sub": "agent:a" + string(rune('0'+i)), "act": act}
	}
	return act
}
