package identity

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"unicode"
)

// Field maps one scalar of the Execution Context: the claim that holds it and a fixed value
// used when the token has no such claim. A default is configuration, not caller input.
type Field struct {
	Claim   string `json:"claim,omitempty"`
	Default string `json:"default,omitempty"`
}

// ServiceAccount recognises tokens an OAuth client obtained for itself (client_credentials):
// when the subject name starts with UsernamePrefix, the subject is Kind (default "service")
// named by NameClaim.
type ServiceAccount struct {
	UsernamePrefix string `json:"usernamePrefix"`
	NameClaim      string `json:"nameClaim"`
	Kind           string `json:"kind,omitempty"`
}

// ClaimMapping says which verified claims become which part of the Execution Context. Claim
// names are looked up first as a top-level claim, then as a dot path into nested objects
// ("realm_access.roles"). docs/identity.md documents the format.
type ClaimMapping struct {
	// SubjectRef names a claim holding "kind:name". When set, SubjectKind and SubjectName are
	// not used.
	SubjectRef     string          `json:"subjectRef,omitempty"`
	SubjectKind    Field           `json:"subjectKind"`
	SubjectName    Field           `json:"subjectName"`
	ServiceAccount *ServiceAccount `json:"serviceAccount,omitempty"`
	// Groups, Roles and Armed name claims holding a string or an array of strings.
	Groups string `json:"groups,omitempty"`
	Roles  string `json:"roles,omitempty"`
	Armed  string `json:"armed,omitempty"`
	// OrgRole is org_owner, org_admin or org_member. With OrgRoleFromRoles, a token without the
	// OrgRole claim takes the highest of those three found among its roles.
	OrgRole          Field `json:"orgRole"`
	OrgRoleFromRoles bool  `json:"orgRoleFromRoles,omitempty"`
	Org              Field `json:"org"`
	Project          Field `json:"project"`
	Environment      Field `json:"environment"`
	Session          Field `json:"session"`
	// Act names the claim saying who acts for the subject (RFC 8693 act: {sub, act?});
	// "" means "act". MayAct names the claim limiting who may ({sub} or a list of them);
	// "" means "may_act". docs/identity.md, "Acting for a person".
	Act    string `json:"act,omitempty"`
	MayAct string `json:"mayAct,omitempty"`
}

// Claim names the development issuer writes (and DevMapping reads).
const (
	ClaimEnvironment = "xema_env"
	ClaimOrgRole     = "xema_org_role"
	ClaimOrg         = "xema_org"
	ClaimProject     = "xema_project"
	ClaimSession     = "xema_session"
	ClaimArmed       = "xema_armed"
	// ClaimUse is "outbound" on the tokens the gateway mints for providers; the verifier
	// refuses every token carrying it.
	ClaimUse         = "xema_use"
	ClaimGroups      = "groups"
	ClaimRoles       = "roles"
	ClaimSubjectKind = "xema_kind"
)

// DevMapping is the default mapping, and the one the development issuer's tokens follow:
// sub is "kind:name", the rest are xema_* claims plus groups and roles. It names no default
// org: a token without one is refused unless the operator names one (--default-org); the
// development issuer's own verifier (DevIssuerMapping) defaults to DefaultOrg.
func DevMapping() ClaimMapping {
	return ClaimMapping{
		SubjectRef:  "sub",
		Groups:      ClaimGroups,
		Roles:       ClaimRoles,
		Armed:       ClaimArmed,
		OrgRole:     Field{Claim: ClaimOrgRole},
		Org:         Field{Claim: ClaimOrg},
		Project:     Field{Claim: ClaimProject},
		Environment: Field{Claim: ClaimEnvironment},
		Session:     Field{Claim: ClaimSession},
	}
}

// DevIssuerMapping is DevMapping with DefaultOrg for tokens that name no org: the
// development issuer's single org.
func DevIssuerMapping() ClaimMapping {
	m := DevMapping()
	m.Org.Default = DefaultOrg
	return m
}

// KeycloakMapping reads Keycloak access tokens: the user is preferred_username, a service
// account (preferred_username "service-account-<client>") is the service named by azp,
// roles are realm_access.roles (org roles among them), groups is the group-membership mapper's
// claim, and the xema_* claims come from protocol mappers (docs/identity.md).
func KeycloakMapping() ClaimMapping {
	return ClaimMapping{
		SubjectKind:      Field{Claim: ClaimSubjectKind, Default: "user"},
		SubjectName:      Field{Claim: "preferred_username"},
		ServiceAccount:   &ServiceAccount{UsernamePrefix: "service-account-", NameClaim: "azp", Kind: "service"},
		Groups:           "groups",
		Roles:            "realm_access.roles",
		Armed:            ClaimArmed,
		OrgRole:          Field{Claim: ClaimOrgRole},
		OrgRoleFromRoles: true,
		Org:              Field{Claim: ClaimOrg},
		Project:          Field{Claim: ClaimProject},
		Environment:      Field{Claim: ClaimEnvironment},
		Session:          Field{Claim: "sid"},
	}
}

// LoadMapping reads a mapping from a JSON file; "" and "default" select DevMapping, "keycloak"
// KeycloakMapping.
func LoadMapping(nameOrPath string) (ClaimMapping, error) {
	switch nameOrPath {
	case "", "default":
		return DevMapping(), nil
	case "keycloak":
		return KeycloakMapping(), nil
	}
	b, err := os.ReadFile(nameOrPath)
	if err != nil {
		return ClaimMapping{}, fmt.Errorf("claim mapping: %w", err)
	}
	m, err := ParseMapping(b)
	if err != nil {
		return ClaimMapping{}, fmt.Errorf("claim mapping %s: %w", nameOrPath, err)
	}
	return m, nil
}

// ParseMapping decodes a JSON mapping strictly (unknown fields are errors) and validates it.
func ParseMapping(b []byte) (ClaimMapping, error) {
	var m ClaimMapping
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return ClaimMapping{}, fmt.Errorf("decode: %w", err)
	}
	if err := m.Validate(); err != nil {
		return ClaimMapping{}, err
	}
	return m, nil
}

var (
	subjectKinds = []string{"user", "agent", "workflow", "service"}
	// orgRoles is ordered from most to least privileged.
	orgRoles = []string{"org_owner", "org_admin", "org_member"}
)

// ValidSubjectKind reports whether kind is user, agent, workflow or service.
func ValidSubjectKind(kind string) bool { return slices.Contains(subjectKinds, kind) }

// ValidOrgRole reports whether role is org_owner, org_admin or org_member.
func ValidOrgRole(role string) bool { return slices.Contains(orgRoles, role) }

// Validate checks that the mapping can produce a subject and an environment.
func (m ClaimMapping) Validate() error {
	if m.SubjectRef == "" {
		if m.SubjectName.Claim == "" {
			return fmt.Errorf("mapping: subjectRef or subjectName.claim is required")
		}
		if m.SubjectKind.Claim == "" && m.SubjectKind.Default == "" {
			return fmt.Errorf("mapping: subjectKind needs a claim or a default")
		}
		if d := m.SubjectKind.Default; d != "" && !ValidSubjectKind(d) {
			return fmt.Errorf("mapping: subjectKind.default %q is not one of %v", d, subjectKinds)
		}
	}
	if sa := m.ServiceAccount; sa != nil {
		if sa.UsernamePrefix == "" || sa.NameClaim == "" {
			return fmt.Errorf("mapping: serviceAccount needs usernamePrefix and nameClaim")
		}
		if sa.Kind != "" && !ValidSubjectKind(sa.Kind) {
			return fmt.Errorf("mapping: serviceAccount.kind %q is not one of %v", sa.Kind, subjectKinds)
		}
	}
	if m.Environment.Claim == "" && m.Environment.Default == "" {
		return fmt.Errorf("mapping: environment needs a claim or a default")
	}
	if d := m.OrgRole.Default; d != "" && !ValidOrgRole(d) {
		return fmt.Errorf("mapping: orgRole.default %q is not one of %v", d, orgRoles)
	}
	return nil
}

// claimValue finds a claim by exact name, else by dot path.
func claimValue(claims map[string]any, name string) (any, bool) {
	if name == "" {
		return nil, false
	}
	if v, ok := claims[name]; ok {
		return v, true
	}
	if !strings.Contains(name, ".") {
		return nil, false
	}
	var cur any = claims
	for part := range strings.SplitSeq(name, ".") {
		obj, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = obj[part]; !ok {
			return nil, false
		}
	}
	return cur, true
}

func stringField(claims map[string]any, f Field) (string, error) {
	v, ok := claimValue(claims, f.Claim)
	if !ok || v == nil {
		return f.Default, nil
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("claim %q is not a string", f.Claim)
	}
	if s == "" {
		return f.Default, nil
	}
	return s, nil
}

func stringList(claims map[string]any, name string) ([]string, error) {
	v, ok := claimValue(claims, name)
	if !ok || v == nil {
		return nil, nil
	}
	switch x := v.(type) {
	case string:
		return []string{x}, nil
	case []any:
		out := make([]string, 0, len(x))
		for _, e := range x {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("claim %q holds a non-string element", name)
			}
			out = append(out, s)
		}
		return out, nil
	case []string:
		return x, nil
	}
	return nil, fmt.Errorf("claim %q is not a string or an array of strings", name)
}

// Map turns verified claims into an Execution Context, or explains why it cannot.
func (m ClaimMapping) Map(claims map[string]any) (ExecContext, error) {
	var ec ExecContext
	var err error
	if ec.Subject, err = m.subject(claims); err != nil {
		return ExecContext{}, err
	}
	if ec.Groups, err = stringList(claims, m.Groups); err != nil {
		return ExecContext{}, err
	}
	if ec.Roles, err = stringList(claims, m.Roles); err != nil {
		return ExecContext{}, err
	}
	if ec.Groups == nil {
		ec.Groups = []string{}
	}
	if ec.Roles == nil {
		ec.Roles = []string{}
	}
	for _, f := range []struct {
		dst *string
		src Field
	}{{&ec.OrgRole, m.OrgRole}, {&ec.Org, m.Org}, {&ec.Project, m.Project}, {&ec.Environment, m.Environment}, {&ec.Session, m.Session}} {
		if *f.dst, err = stringField(claims, f.src); err != nil {
			return ExecContext{}, err
		}
	}
	if ec.Org == "" {
		// An external issuer's token lands in an org only by its claim or the operator's
		// --default-org: never silently in the operator's own org.
		// Said to the caller and the operator alike: which claim, and the flag that lands such tokens.
		return ExecContext{}, fmt.Errorf("no org (claim %q) and no default org for this issuer: the issuer must set the claim, or the gateway name the org of such tokens with xema serve --default-org ORG", m.Org.Claim)
	}
	if ec.OrgRole == "" && m.OrgRoleFromRoles {
		for _, r := range orgRoles {
			if slices.Contains(ec.Roles, r) {
				ec.OrgRole = r
				break
			}
		}
	}
	if ec.OrgRole != "" && !ValidOrgRole(ec.OrgRole) {
		return ExecContext{}, fmt.Errorf("org role %q is not one of %v", truncate(ec.OrgRole, 40), orgRoles)
	}
	if ec.Environment == "" {
		return ExecContext{}, fmt.Errorf("no environment (claim %q)", m.Environment.Claim)
	}
	if ec.Armed, err = stringList(claims, m.Armed); err != nil {
		return ExecContext{}, err
	}
	if _, present := claimValue(claims, m.Armed); !present {
		ec.Armed = []string{"*"}
	}
	if err := ValidateArmed(ec.Armed); err != nil {
		return ExecContext{}, err
	}
	if ec, err = m.delegate(claims, ec); err != nil {
		return ExecContext{}, err
	}
	if err := noControl(ec); err != nil {
		return ExecContext{}, err
	}
	return ec, nil
}

// noControl refuses a context any of whose strings holds a control character: they end up
// in audit records, approvals and an admin's terminal, where an escape sequence is an attack.
func noControl(ec ExecContext) error {
	fields := []struct {
		name   string
		values []string
	}{{"subject", []string{ec.Subject.Ref}}, {"org", []string{ec.Org}}, {"project", []string{ec.Project}},
		{"environment", []string{ec.Environment}}, {"session", []string{ec.Session}}, {"groups", ec.Groups},
		{"roles", ec.Roles}, {"armed", ec.Armed}}
	if d := ec.Delegation; d != nil {
		fields = append(fields, []struct {
			name   string
			values []string
		}{{"act chain", d.Actors}, {"may_act", d.MayAct}, {"groups", d.Groups}, {"roles", d.Roles}}...)
	}
	for _, f := range fields {
		for _, v := range f.values {
			if strings.ContainsFunc(v, unicode.IsControl) {
				return fmt.Errorf("the %s holds a control character", f.name)
			}
		}
	}
	return nil
}

func (m ClaimMapping) subject(claims map[string]any) (Subject, error) {
	var kind, name string
	if m.SubjectRef != "" {
		ref, err := stringField(claims, Field{Claim: m.SubjectRef})
		if err != nil {
			return Subject{}, err
		}
		var ok bool
		if kind, name, ok = strings.Cut(ref, ":"); !ok {
			return Subject{}, fmt.Errorf("claim %q is not kind:name", m.SubjectRef)
		}
	} else {
		var err error
		if name, err = stringField(claims, m.SubjectName); err != nil {
			return Subject{}, err
		}
		if kind, err = stringField(claims, m.SubjectKind); err != nil {
			return Subject{}, err
		}
		if sa := m.ServiceAccount; sa != nil && strings.HasPrefix(name, sa.UsernamePrefix) {
			if name, err = stringField(claims, Field{Claim: sa.NameClaim}); err != nil {
				return Subject{}, err
			}
			kind = sa.Kind
			if kind == "" {
				kind = "service"
			}
		}
	}
	if !ValidSubjectKind(kind) {
		return Subject{}, fmt.Errorf("subject kind %q is not one of %v", truncate(kind, 40), subjectKinds)
	}
	if name == "" || strings.ContainsAny(name, " \t\r\n") {
		return Subject{}, fmt.Errorf("subject name is empty or has whitespace")
	}
	return Subject{Kind: kind, Ref: kind + ":" + name}, nil
}
