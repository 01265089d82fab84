package policy

import (
	"errors"
	"fmt"
	"slices"

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
	return decodeFields(obj)
}

// decodeFields decodes the fields of a decision object as decodeDecision.
func decodeFields(obj ast.Object) (Decision, error) {
	// By lookup of the fields, not a closure for obj.Iter: d would escape, an allocation a
	// decision.
	var d Decision
	found := 0
	for _, k := range decisionKeys {
		if val := obj.Get(k); val != nil {
			found++
			if err := d.field(string(k.Value.(ast.String)), val); err != nil {
				return Decision{}, err
			}
		}
	}
	if found == obj.Len() {
		return d, nil
	}
	for _, k := range obj.Keys() {
		key, ok := k.Value.(ast.String)
		if !ok {
			return Decision{}, fmt.Errorf("decision key %v is not a string", k)
		}
		if !slices.ContainsFunc(decisionKeys, k.Equal) {
			return Decision{}, fmt.Errorf("decision: unknown field %q", string(key))
		}
	}
	return Decision{}, errors.New("decision: unknown field")
}

// field decodes the decision's field key (one of decisionKeys) of value val.
func (d *Decision) field(key string, val *ast.Term) error {
	switch key {
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
		return decodeList("decision.reasons", val.Value, &d.Reasons, func(i int, o ast.Object) (r Reason, err error) {
			err = stringFields("decision.reasons", i, o, reasonKeys, []*string{&r.Code, &r.Detail})
			return r, err
		})
	case "suggestions":
		return decodeList("decision.suggestions", val.Value, &d.Suggestions, func(i int, o ast.Object) (s Suggestion, err error) {
			err = stringFields("decision.suggestions", i, o, suggestionKeys,
				[]*string{&s.Kind, &s.Capability, &s.Environment, &s.From, &s.To, &s.Binding, &s.Subject, &s.Server, &s.Owner, &s.URL})
			return s, err
		})
	case "obligations":
		return decodeList("decision.obligations", val.Value, &d.Obligations, func(i int, o ast.Object) (ob Obligation, err error) {
			if v := o.Get(kRequests); v != nil {
				n, ok := v.Value.(ast.Number)
				if !ok {
					return ob, typeErr("decision.obligations.requests", "number", v.Value)
				}
				if ob.Requests, ok = n.Int(); !ok {
					return ob, fmt.Errorf("decision.obligations.requests: %v is not an int", n)
				}
			}
			err = stringFields("decision.obligations", i, o, obligationKeys, []*string{&ob.Kind, &ob.Per}, kRequests)
			return ob, err
		})
	}
	return nil
}

// The fields of a decision, and of its reasons, suggestions and obligations.
var (
	decisionKeys = []*ast.Term{ast.StringTerm("allow"), ast.StringTerm("reasons"), ast.StringTerm("suggestions"),
		ast.StringTerm("obligations"), ast.StringTerm("revision")}
	reasonKeys     = []*ast.Term{ast.StringTerm("code"), ast.StringTerm("detail")}
	suggestionKeys = []*ast.Term{ast.StringTerm("kind"), ast.StringTerm("capability"), ast.StringTerm("environment"),
		ast.StringTerm("from"), ast.StringTerm("to"), ast.StringTerm("binding"), ast.StringTerm("subject"),
		ast.StringTerm("server"), ast.StringTerm("owner"), ast.StringTerm("url")}
	obligationKeys = []*ast.Term{ast.StringTerm("kind"), ast.StringTerm("per")}
	kRequests      = ast.StringTerm("requests")
)

// stringFields reads the string fields keys of the object o (element i of the array name)
// into dsts, by lookup rather than a closure per field. o may also hold the fields read (the
// caller reads them); any other is an unknown field, an error.
func stringFields(name string, i int, o ast.Object, keys []*ast.Term, dsts []*string, read ...*ast.Term) error {
	found := 0
	for _, k := range read {
		if o.Get(k) != nil {
			found++
		}
	}
	for j, k := range keys {
		v := o.Get(k)
		if v == nil {
			continue
		}
		found++
		s, err := str(v.Value)
		if err != nil {
			return fmt.Errorf("%s.%s %w", name, string(k.Value.(ast.String)), err)
		}
		*dsts[j] = s
	}
	if found == o.Len() {
		return nil
	}
	for _, k := range o.Keys() {
		if !slices.ContainsFunc(keys, k.Equal) && !slices.ContainsFunc(read, k.Equal) {
			return fmt.Errorf("%s[%d]: unknown field %v", name, i, k)
		}
	}
	return fmt.Errorf("%s[%d]: unknown field", name, i)
}

// str is v as a string; its error names no field (the caller does), so a decision decoded
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

func arrayLen(v ast.Value) int {
	if a, ok := v.(*ast.Array); ok {
		return a.Len()
	}
	return 0
}

// decodeList decodes the array of objects val into *dst, each by dec (an empty array into
// an empty slice, not nil).
func decodeList[T any](name string, val ast.Value, dst *[]T, dec func(int, ast.Object) (T, error)) error {
	return eachObject(name, val, func(i int, o ast.Object) error {
		t, err := dec(i, o)
		if err != nil {
			return err
		}
		if *dst == nil {
			*dst = make([]T, 0, arrayLen(val))
		}
		*dst = append(*dst, t)
		return nil
	}, func() { *dst = []T{} })
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
