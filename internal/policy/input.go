package policy

import "github.com/open-policy-agent/opa/v1/ast"

// Key terms of the input document, built once: terms are immutable in evaluation, so every
// input shares them (as OPA's own interned terms are shared).
var (
	kRef, kSubject, kKind, kGroups     = ast.StringTerm("ref"), ast.StringTerm("subject"), ast.StringTerm("kind"), ast.StringTerm("groups")
	kRoles, kEnvironment, kArmed       = ast.StringTerm("roles"), ast.StringTerm("environment"), ast.StringTerm("armed")
	kUsage, kRateExceeded              = ast.StringTerm("usage"), ast.StringTerm("rateExceeded")
	kQuotaExceeded, kRetryAfter        = ast.StringTerm("quotaExceeded"), ast.StringTerm("retryAfterSeconds")
	kBindings, kInstanceRelations      = ast.StringTerm("bindings"), ast.StringTerm("instanceRelations")
	kApproval, kRequester, kApprovalID = ast.StringTerm("approval"), ast.StringTerm("requester"), ast.StringTerm("approvalId")
	optionalKeys                       = [...]*ast.Term{ast.StringTerm("biome"), ast.StringTerm("orgRole"), ast.StringTerm("org"),
		ast.StringTerm("project"), ast.StringTerm("session"), ast.StringTerm("resource"), ast.StringTerm("resourceOwner")}
)

// inputValue builds the input document directly as an AST value: it skips the JSON round
// trip rego.EvalInput would do on every call. Field names follow Input's JSON tags.
func inputValue(in Input) ast.Value {
	obj := ast.NewObjectWithCapacity(16)
	obj.Insert(kRef, ast.StringTerm(in.Ref))
	obj.Insert(kSubject, ast.NewTerm(ast.NewObject(
		[2]*ast.Term{kKind, ast.StringTerm(in.Subject.Kind)},
		[2]*ast.Term{kRef, ast.StringTerm(in.Subject.Ref)},
	)))
	obj.Insert(kGroups, stringArray(in.Groups))
	obj.Insert(kRoles, stringArray(in.Roles))
	obj.Insert(kEnvironment, ast.StringTerm(in.Environment))
	obj.Insert(kArmed, stringArray(in.Armed))
	optional := [...]string{in.Biome, in.OrgRole, in.Org, in.Project, in.Session, in.Resource, in.ResourceOwner}
	for i, v := range optional {
		if v != "" {
			obj.Insert(optionalKeys[i], ast.StringTerm(v))
		}
	}
	if in.Usage != nil {
		obj.Insert(kUsage, ast.NewTerm(ast.NewObject(
			[2]*ast.Term{kRateExceeded, ast.InternedTerm(in.Usage.RateExceeded)},
			[2]*ast.Term{kQuotaExceeded, ast.InternedTerm(in.Usage.QuotaExceeded)},
			[2]*ast.Term{kRetryAfter, ast.InternedTerm(in.Usage.RetryAfterSeconds)},
		)))
	}
	if in.Bindings != nil {
		obj.Insert(kBindings, ast.NewTerm(flagObject(in.Bindings)))
	}
	if in.InstanceRelations != nil {
		obj.Insert(kInstanceRelations, ast.NewTerm(flagObject(in.InstanceRelations)))
	}
	if in.Approval != nil {
		obj.Insert(kApproval, ast.NewTerm(ast.NewObject(
			[2]*ast.Term{kRequester, ast.StringTerm(in.Approval.Requester)},
			[2]*ast.Term{kApprovalID, ast.StringTerm(in.Approval.ApprovalID)},
		)))
	}
	return obj
}

func stringArray(ss []string) *ast.Term {
	terms := make([]*ast.Term, len(ss))
	for i, s := range ss {
		terms[i] = ast.StringTerm(s)
	}
	return ast.NewTerm(ast.NewArray(terms...))
}

func flagObject(m map[string]bool) ast.Value {
	obj := ast.NewObjectWithCapacity(len(m))
	for k, v := range m {
		obj.Insert(ast.StringTerm(k), ast.InternedTerm(v))
	}
	return obj
}
