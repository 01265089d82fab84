package policy

import "github.com/open-policy-agent/opa/v1/ast"

// inputValue builds the input document directly as an AST value: it skips the JSON round
// trip rego.EvalInput would do on every call. Field names follow Input's JSON tags.
func inputValue(in Input) ast.Value {
	obj := ast.NewObject(
		field("ref", ast.String(in.Ref)),
		field("subject", ast.NewObject(
			field("kind", ast.String(in.Subject.Kind)),
			field("ref", ast.String(in.Subject.Ref)),
		)),
		field("groups", stringArray(in.Groups)),
		field("roles", stringArray(in.Roles)),
		field("environment", ast.String(in.Environment)),
		field("armed", stringArray(in.Armed)),
	)
	optional := []struct{ key, value string }{
		{"biome", in.Biome}, {"orgRole", in.OrgRole}, {"org", in.Org}, {"project", in.Project},
		{"session", in.Session}, {"resource", in.Resource}, {"resourceOwner", in.ResourceOwner},
	}
	for _, o := range optional {
		if o.value != "" {
			obj.Insert(ast.StringTerm(o.key), ast.StringTerm(o.value))
		}
	}
	if in.Usage != nil {
		obj.Insert(ast.StringTerm("usage"), ast.NewTerm(ast.NewObject(
			field("rateExceeded", ast.Boolean(in.Usage.RateExceeded)),
			field("quotaExceeded", ast.Boolean(in.Usage.QuotaExceeded)),
			field("retryAfterSeconds", ast.IntNumberTerm(in.Usage.RetryAfterSeconds).Value),
		)))
	}
	if in.Bindings != nil {
		obj.Insert(ast.StringTerm("bindings"), ast.NewTerm(flagObject(in.Bindings)))
	}
	if in.InstanceRelations != nil {
		obj.Insert(ast.StringTerm("instanceRelations"), ast.NewTerm(flagObject(in.InstanceRelations)))
	}
	if in.Approval != nil {
		obj.Insert(ast.StringTerm("approval"), ast.NewTerm(ast.NewObject(
			field("requester", ast.String(in.Approval.Requester)),
			field("approvalId", ast.String(in.Approval.ApprovalID)),
		)))
	}
	return obj
}

func field(key string, v ast.Value) [2]*ast.Term {
	return ast.Item(ast.StringTerm(key), ast.NewTerm(v))
}

func stringArray(ss []string) ast.Value {
	terms := make([]*ast.Term, len(ss))
	for i, s := range ss {
		terms[i] = ast.StringTerm(s)
	}
	return ast.NewArray(terms...)
}

func flagObject(m map[string]bool) ast.Value {
	obj := ast.NewObject()
	for k, v := range m {
		obj.Insert(ast.StringTerm(k), ast.BooleanTerm(v))
	}
	return obj
}
