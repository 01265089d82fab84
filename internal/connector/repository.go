package connector

import (
	"encoding/json"
	"fmt"
	"regexp"

	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/kernel"
)

// Repository is the config of an SCM or tracker binding: the repository the binding serves,
// so callers never name it.
type Repository struct {
	Owner string
	Name  string
}

// FullName is "owner/name".
func (r Repository) FullName() string { return r.Owner + "/" + r.Name }

var repoPattern = regexp.MustCompile(`^([A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*)/([A-Za-z0-9_.-]+)$`)

// ParseRepository reads {"repository": "owner/name"} (GitLab groups may nest: "a/b/name").
func ParseRepository(config json.RawMessage) (Repository, error) {
	var c struct {
		Repository string `json:"repository"`
	}
	if err := json.Unmarshal(config, &c); err != nil {
		return Repository{}, fmt.Errorf("/config must be an object with /config/repository")
	}
	m := repoPattern.FindStringSubmatch(c.Repository)
	if m == nil || len(c.Repository) > 200 {
		return Repository{}, fmt.Errorf("/config/repository must be \"owner/name\"")
	}
	return Repository{Owner: m[1], Name: m[2]}, nil
}

// CheckRepositoryConfig is Provider.CheckConfig for SCM and tracker providers.
func CheckRepositoryConfig(config json.RawMessage) error {
	_, err := ParseRepository(config)
	return err
}

// BoundRepository reads the repository of a stored binding at call time; a binding that no
// longer parses is the admin's to fix, never the caller's.
func BoundRepository(t Target) (Repository, error) {
	r, err := ParseRepository(t.Config)
	if err != nil {
		return Repository{}, fault.New(fault.Provider, CodeBindingInvalid, "the binding's %s", err.Error())
	}
	return r, nil
}

// RepositoryCall is the preamble of every SCM and tracker handler: the call's validated input
// decoded into In, and the repository the binding serves.
func RepositoryCall[In any](t Target, call kernel.Call) (In, Repository, error) {
	var in In
	if err := json.Unmarshal(call.Input, &in); err != nil {
		return in, Repository{}, fmt.Errorf("decode validated input: %w", err)
	}
	repo, err := BoundRepository(t)
	if err != nil {
		return in, Repository{}, err
	}
	return in, repo, nil
}
