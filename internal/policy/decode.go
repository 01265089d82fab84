package policy

import (
	"fmt"

	"github.com/open-policy-agent/opa/v1/ast"
)

// decodeDecision converts the AST value of data.xema.authz.decision into a Decision
// directly, with the strictness the JSON decoder had (encoding/json with
// DisallowUnknownFields): an unknown field or a value of the wrong type is an error, so a
// policy that drifts from the contract fails closed instead of deciding half-read.
func decodeDecision(v ast.Value) (Decision, error) {
	obj, ok := v.(ast.Object)
	if !ok {
		return Decision{}, fmt.Errorf("decision is %s, not an object", ast.ValueName(v))
	}
	var d Decision
	err := obj.Iter(func(k, val *ast.Term) error {
		key, ok := k.Value.(ast.String)
		if !ok {
			return fmt.Errorf("decision key %v is not a string", k)
		}
		switch string(key) {
		case "allow":
			b, ok := val.Value.(ast.Boolean)
			if !ok {
				return typeErr("decision.allow", "boolean", val.Value)
			}
			d.Allow = bool(b)
		case "revision":
			s, err := str(val.Value)
			if err != nil {
				return fmt.Errorf("decision.revision %w", err)
			}
			d.Revision = s
		case "reasons":
			return eachObject("decision.reasons", val.Value, func(i int, o ast.Object) error {
				var r Reason
				err := o.Iter(func(k, v *ast.Term) error {
					var dst *string
					switch name, _ := k.Value.(ast.String); string(name) {
					case "code":
						dst = &r.Code
					case "detail":
						dst = &r.Detail
					default:
						return fmt.Errorf("decision.reasons[%d]: unknown field %v", i, k)
					}
					s, err := str(v.Value)
					*dst = s
					return field(err, "decision.reasons.", k)
				})
				if d.Reasons == nil {
					d.Reasons = make([]Reason, 0, arrayLen(val.Value))
				}
				d.Reasons = append(d.Reasons, r)
				return err
			}, func() { d.Reasons = []Reason{} })
		case "suggestions":
			return eachObject("decision.suggestions", val.Value, func(i int, o ast.Object) error {
				var s Suggestion
				err := o.Iter(func(k, v *ast.Term) error {
					var dst *string
					switch name, _ := k.Value.(ast.String); string(name) {
					case "kind":
						dst = &s.Kind
					case "capability":
						dst = &s.Capability
					case "environment":
						dst = &s.Environment
					case "from":
						dst = &s.From
					case "to":
						dst = &s.To
					case "binding":
						dst = &s.Binding
					default:
						return fmt.Errorf("decision.suggestions[%d]: unknown field %v", i, k)
					}
					x, err := str(v.Value)
					*dst = x
					return field(err, "decision.suggestions.", k)
				})
				if d.Suggestions == nil {
					d.Suggestions = make([]Suggestion, 0, arrayLen(val.Value))
				}
				d.Suggestions = append(d.Suggestions, s)
				return err
			}, func() { d.Suggestions = []Suggestion{} })
		case "obligations":
			return eachObject("decision.obligations", val.Value, func(i int, o ast.Object) error {
				var ob Obligation
				err := o.Iter(func(k, v *ast.Term) error {
					switch name, _ := k.Value.(ast.String); string(name) {
					case "kind":
						s, err := str(v.Value)
						ob.Kind = s
						return field(err, "decision.obligations.", k)
					case "per":
						s, err := str(v.Value)
						ob.Per = s
						return field(err, "decision.obligations.", k)
					case "requests":
						n, ok := v.Value.(ast.Number)
						if !ok {
							return typeErr("decision.obligations.requests", "number", v.Value)
						}
						i, ok := n.Int()
						if !ok {
							return fmt.Errorf("decision.obligations.requests: %v is not an int", n)
						}
						ob.Requests = i
						return nil
					default:
						return fmt.Errorf("decision.obligations[%d]: unknown field %v", i, k)
					}
				})
				if d.Obligations == nil {
					d.Obligations = make([]Obligation, 0, arrayLen(val.Value))
				}
				d.Obligations = append(d.Obligations, ob)
				return err
			}, func() { d.Obligations = []Obligation{} })
		default:
			return fmt.Errorf("decision: unknown field %q", string(key))
		}
		return nil
	})
	if err != nil {
		return Decision{}, err
	}
	return d, nil
}

// str is v as a string; its error names no field (field does), so a decision decoded
// without error builds no name.
func str(v ast.Value) (string, error) {
	if _, ok := v.(ast.Null); ok {
		return "", nil // as encoding/json: null leaves the field zero
	}
	s, ok := v.(ast.String)
	if !ok {
		return "", fmt.Errorf("is %s, not string", ast.ValueName(v))
	}
	return string(s), nil
}

// field names the field key of prefix in err, nil when err is.
func field(err error, prefix string, key *ast.Term) error {
	if err == nil {
		return nil
	}
	name, _ := key.Value.(ast.String)
	return fmt.Errorf("%s%s %w", prefix, string(name), err)
}

func arrayLen(v ast.Value) int {
	if a, ok := v.(*ast.Array); ok {
		return a.Len()
	}
	return 0
}

// eachObject calls fn for each element of an array of objects; empty marks an empty array
// (as encoding/json decodes [] into a non-nil empty slice). null leaves the slice nil.
func eachObject(name string, v ast.Value, fn func(int, ast.Object) error, empty func()) error {
	if _, ok := v.(ast.Null); ok {
		return nil
	}
	a, ok := v.(*ast.Array)
	if !ok {
		return typeErr(name, "array", v)
	}
	if a.Len() == 0 {
		empty()
		return nil
	}
	for i := range a.Len() {
		o, ok := a.Elem(i).Value.(ast.Object)
		if !ok {
			return typeErr(fmt.Sprintf("%s[%d]", name, i), "object", a.Elem(i).Value)
		}
		if err := fn(i, o); err != nil {
			return err
		}
	}
	return nil
}

func typeErr(name, want string, got ast.Value) error {
	return fmt.Errorf("%s is %s, not %s", name, ast.ValueName(got), want)
}
