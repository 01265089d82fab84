package explain

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/xemahq/xema/internal/audit"
	"github.com/xemahq/xema/internal/manifest"
	"github.com/xemahq/xema/internal/policy"
	"github.com/xemahq/xema/internal/ratelimit"
)

func reasons(codes ...string) []policy.Reason {
	out := make([]policy.Reason, 0, len(codes))
	for _, c := range codes {
		detail := "detail of " + c
		if c == ratelimit.CodeRateLimited {
			detail = "rate limit for kb:page.read@1 exceeded; retry after 7 s"
		}
		out = append(out, policy.Reason{Code: c, Detail: detail})
	}
	return out
}

func base(codes ...string) Case {
	return Case{Capability: "kb:page.read@1", BiomeID: "demo", BiomeVersion: "1.0.0", Subject: "agent:bot", Environment: "project", Reasons: reasons(codes...)}
}

// Every case of issue 25 and each kind of suggestion: what a caller is told.
func TestOf(t *testing.T) {
	grantHere := policy.Suggestion{Kind: "request-grant", Capability: "kb:page.read@1", Environment: "project"}
	cases := []struct {
		name  string
		c     Case
		next  []string // each must be one step, in order
		perms []Permission
	}{
		{"missing grant: the grant, in words and exactly", func() Case { c := base("MISSING_GRANT"); c.Suggestions = []policy.Suggestion{grantHere}; return c }(),
			[]string{"ask an org admin to grant kb:page.read@1 in environment project"},
			[]Permission{{BiomeID: "demo", BiomeVersion: "1.0.0", Capability: "kb:page.read@1", Environments: []string{"project"}, Subjects: []string{"agent:bot"}}}},
		{"subject not covered: the permission names the subject", func() Case {
			c := base("SUBJECT_NOT_COVERED")
			c.Suggestions = []policy.Suggestion{{Kind: "request-grant", Capability: "kb:page.read@1", Environment: "project", Subject: "agent:bot"}}
			return c
		}(), []string{"ask an org admin to grant kb:page.read@1 to agent:bot in environment project"},
			[]Permission{{BiomeID: "demo", BiomeVersion: "1.0.0", Capability: "kb:page.read@1", Environments: []string{"project"}, Subjects: []string{"agent:bot"}}}},
		{"rate limited: when to retry", base(ratelimit.CodeRateLimited),
			[]string{"wait, then retry: rate limit for kb:page.read@1 exceeded; retry after 7 s (the denial's Retry-After header and retryAfter field say when)"}, nil},
		{"rate limited, asked live while under the limit: the limit's window", func() Case {
			c := base()
			c.Allowed, c.Asked = true, ratelimit.CodeRateLimited
			c.Obligations = []policy.Obligation{{Kind: "rate-limit", Requests: 60, Per: "1m"}, {Kind: "quota", Requests: 100, Per: "24h"}}
			return c
		}(), []string{"wait, then retry: the rate-limit admits 60 calls per 1m; a denial's Retry-After says when its window ends"}, nil},
		{"quota", base(ratelimit.CodeQuotaExceeded), []string{"wait for the quota's window to end, then retry: detail of QUOTA_EXCEEDED (the denial's retryAfter says when)"}, nil},
		// An agent posting /v1/grants: the policy suggests no grant of the kernel's biome.
		{"a kernel capability: nothing to ask for", func() Case { c := base("MISSING_GRANT"); c.BiomeID = "xema"; return c }(), []string{Nothing}, nil},
		{"held by role: the role, never a grant", func() Case {
			c := base("HUMAN_BASELINE_NOT_MET", "MISSING_GRANT")
			c.Subject, c.Role, c.Environment = "user:bob", "org_admin", "org"
			c.Suggestions = []policy.Suggestion{{Kind: "request-grant", Capability: "kb:page.read@1", Environment: "org"}}
			return c
		}(), []string{"ask for org role org_admin (it holds kb:page.read@1 without a grant)"}, nil},
		{"a platform rule: nothing", base("KB_FROZEN"), []string{Nothing}, nil},
		{"allowed: a grant the caller holds is not suggested", func() Case {
			c := base()
			c.Allowed, c.Asked = true, "KB_FROZEN"
			c.Suggestions = []policy.Suggestion{grantHere}
			return c
		}(), []string{"the policy allows this call now: KB_FROZEN no longer applies"}, nil},
		{"wrong environment: move, or the grant there", func() Case {
			c := base("ENVIRONMENT_NOT_ALLOWED")
			c.Environment = "org"
			c.Suggestions = []policy.Suggestion{{Kind: "switch-environment", From: "org", To: "project"}, {Kind: "request-grant", Capability: "kb:page.read@1", Environment: "org"}}
			return c
		}(), []string{"call from environment project instead of org (the grant admits it there)", "ask an org admin to grant kb:page.read@1 in environment org"},
			[]Permission{{BiomeID: "demo", BiomeVersion: "1.0.0", Capability: "kb:page.read@1", Environments: []string{"project", "org"}, Subjects: []string{"agent:bot"}}}},
		{"successor, approval, binding", func() Case {
			c := base("CAPABILITY_RETIRED", "MISSING_BINDING")
			c.Suggestions = []policy.Suggestion{{Kind: "use-successor", Capability: "kb:page.read@2"}, {Kind: "request-approval", Capability: "kb:page.read@1"},
				{Kind: "establish-binding", Capability: "connector:scm.bind@1", Binding: "repository/writer"}}
			return c
		}(), []string{"call kb:page.read@2 instead", "each call of kb:page.read@1 waits for a person's approval: ask an approver",
			"establish binding repository/writer first, with connector:scm.bind@1"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			x := Of(tc.c)
			if !slices.Equal(x.Next, tc.next) {
				t.Errorf("next:\n got %q\nwant %q", x.Next, tc.next)
			}
			if tc.perms == nil {
				tc.perms = []Permission{}
			}
			if !reflect.DeepEqual(x.Permissions, tc.perms) {
				t.Errorf("permissions: got %+v, want %+v", x.Permissions, tc.perms)
			}
			// Idempotent: why-denied explains the suggestions the denial recorded.
			again := tc.c
			again.Suggestions = x.Suggestions
			if y := Of(again); !reflect.DeepEqual(x, y) {
				t.Errorf("explaining the explanation again changed it:\n%+v\n%+v", x, y)
			}
		})
	}
}

// Every reason code a built-in denial can carry is explained: a step, or the sentence that
// nothing would help; a limit always says when to retry; never an empty answer.
func TestEveryCode(t *testing.T) {
	eng, err := policy.New(t.Context(), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	codes := eng.ReasonCodes()
	if len(codes) < 15 {
		t.Fatalf("only %d reason codes: %v", len(codes), codes)
	}
	for _, code := range codes {
		x := Of(base(code))
		if len(x.Next) == 0 {
			t.Errorf("%s: no next step", code)
		}
		limit := code == ratelimit.CodeRateLimited || code == ratelimit.CodeQuotaExceeded
		if limit != strings.Contains(strings.Join(x.Next, " "), "retry") {
			t.Errorf("%s: %q (a limit says when to retry, nothing else does)", code, x.Next)
		}
		if len(x.Permissions) != 0 {
			t.Errorf("%s: a permission without the policy suggesting a grant: %+v", code, x.Permissions)
		}
	}
}

func TestRoleHolding(t *testing.T) {
	admins := &manifest.HumanBaseline{Kind: "org-administrators"}
	role := &manifest.HumanBaseline{Kind: "org-role", MinimumOrgRole: "org_member"}
	for _, tc := range []struct {
		hb   *manifest.HumanBaseline
		kind string
		want string
	}{{admins, "user", "org_admin"}, {role, "user", "org_member"}, {admins, "agent", ""}, {nil, "user", ""}, {&manifest.HumanBaseline{Kind: "explicit-only"}, "user", ""}} {
		if got := RoleHolding(tc.hb, tc.kind); got != tc.want {
			t.Errorf("RoleHolding(%+v, %s) = %q, want %q", tc.hb, tc.kind, got, tc.want)
		}
	}
}

// A recorded denial explains as the call's answer did; a record whose suggestions do not
// decode is an error naming it.
func TestRecorded(t *testing.T) {
	c := base("SUBJECT_NOT_COVERED")
	c.Suggestions = []policy.Suggestion{{Kind: "request-grant", Capability: "kb:page.read@1", Environment: "project", Subject: "agent:bot"}}
	x := Of(c)
	sugg, _ := json.Marshal(x.Suggestions)
	rs, _ := json.Marshal(c.Reasons)
	den := audit.Denial{AuditID: "deny_1", Subject: audit.Subject{Kind: "agent", Ref: "agent:bot"}, Capability: "kb:page.read@1",
		Environment: "project", Reasons: rs, Suggestions: sugg}
	rc, err := Recorded(nil, den)
	if err != nil {
		t.Fatal(err)
	}
	rc.BiomeID, rc.BiomeVersion = "demo", "1.0.0" // the catalog's entry, here by hand
	if y := Of(rc); !reflect.DeepEqual(x, y) {
		t.Fatalf("recorded: %+v, answered: %+v", y, x)
	}
	den.Suggestions = json.RawMessage(`{"kind":1}`)
	if _, err := Recorded(nil, den); err == nil || !strings.Contains(err.Error(), "deny_1") {
		t.Fatalf("undecodable suggestions: %v", err)
	}
}
