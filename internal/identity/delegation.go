package identity

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// MaxActDepth bounds the act chain a token may carry: an agent acting for an agent acting
// for a person is two; a deeper chain is refused rather than walked.
const MaxActDepth = 4

// delegate turns a token whose act claim says an actor acts for its subject into the
// delegated context: the subject becomes the outermost actor, and the person's org role,
// groups and roles move into the delegation, so nothing of the person's standing is the
// actor's own. A token without the claim is returned as it is.
func (m ClaimMapping) delegate(claims map[string]any, ec ExecContext) (ExecContext, error) {
	actName := cmp.Or(m.Act, "act")
	raw, ok := claimValue(claims, actName)
	if !ok || raw == nil {
		return ec, nil
	}
	actors, err := actChain(actName, raw)
	if err != nil {
		return ExecContext{}, err
	}
	if ec.Subject.Kind != "user" {
		return ExecContext{}, fmt.Errorf("claim %q: only a person (a subject of kind user) can be acted for, not %s", actName, truncate(ec.Subject.Ref, 60))
	}
	if slices.Contains(actors, ec.Subject.Ref) {
		return ExecContext{}, fmt.Errorf("claim %q names the token's own subject %s as its actor", actName, truncate(ec.Subject.Ref, 60))
	}
	mayActName := cmp.Or(m.MayAct, "may_act")
	var mayAct []string
	if v, ok := claimValue(claims, mayActName); ok && v != nil {
		if mayAct, err = mayActors(mayActName, v); err != nil {
			return ExecContext{}, err
		}
	}
	kind, _, _ := strings.Cut(actors[0], ":")
	ec.Delegation = &Delegation{Person: ec.Subject, OrgRole: ec.OrgRole, Groups: ec.Groups, Roles: ec.Roles,
		Actors: actors, MayAct: mayAct}
	ec.Subject = Subject{Kind: kind, Ref: actors[0]}
	ec.OrgRole, ec.Groups, ec.Roles = "", []string{}, []string{}
	return ec, nil
}

// actChain reads an act claim: an object with sub, whose own act is the actor before it.
func actChain(name string, v any) ([]string, error) {
	var chain []string
	for v != nil {
		if len(chain) == MaxActDepth {
			return nil, fmt.Errorf("claim %q: the act chain is deeper than %d", name, MaxActDepth)
		}
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("claim %q is not an object with sub", name)
		}
		ref, err := actorRef(name, obj["sub"])
		if err != nil {
			return nil, err
		}
		if slices.Contains(chain, ref) {
			return nil, fmt.Errorf("claim %q names %s twice in its chain", name, truncate(ref, 60))
		}
		chain = append(chain, ref)
		v = obj["act"]
	}
	return chain, nil
}

// mayActors reads a may_act claim: one {sub} object or a list of them.
func mayActors(name string, v any) ([]string, error) {
	list, ok := v.([]any)
	if !ok {
		list = []any{v}
	}
	out := make([]string, 0, len(list))
	for _, e := range list {
		obj, ok := e.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("claim %q is not an object with sub (or a list of them)", name)
		}
		ref, err := actorRef(name, obj["sub"])
		if err != nil {
			return nil, err
		}
		out = append(out, ref)
	}
	return out, nil
}

// actorRef is an actor's subject ref: sub as "kind:name" when it names a known kind, else
// an agent named sub (an issuer's client id).
func actorRef(name string, sub any) (string, error) {
	s, ok := sub.(string)
	if !ok || s == "" || strings.ContainsAny(s, " \t\r\n") {
		return "", fmt.Errorf("claim %q: sub must be a non-empty string without whitespace", name)
	}
	if kind, rest, ok := strings.Cut(s, ":"); ok && ValidSubjectKind(kind) && rest != "" {
		return s, nil
	}
	return "agent:" + s, nil
}
