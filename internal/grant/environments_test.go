package grant

import (
	"reflect"
	"strings"
	"testing"
)

func TestDefaultEnvironments(t *testing.T) {
	envs := DefaultEnvironments()
	for _, k := range Kinds {
		if got, ok := envs.Lookup(k); !ok || got != k {
			t.Errorf("Lookup(%q) = %q, %v", k, got, ok)
		}
	}
	if got, _ := envs.Lookup("public-session"); got != KindPublic {
		t.Errorf("public-session kind = %q", got)
	}
	if _, ok := envs.Lookup("prod"); ok {
		t.Error("prod known by default")
	}
	if got := envs.OfKinds([]string{KindPublic, KindSession}); !reflect.DeepEqual(got, []string{"public", "public-session", "session"}) {
		t.Errorf("OfKinds = %v", got)
	}
}

func TestParseEnvironments(t *testing.T) {
	envs, err := ParseEnvironments([]string{"prod-eu=project", "kiosk=public", "project=project"})
	if err != nil {
		t.Fatal(err)
	}
	if k, _ := envs.Lookup("prod-eu"); k != KindProject {
		t.Errorf("prod-eu = %q", k)
	}
	if _, ok := DefaultEnvironments().Lookup("prod-eu"); ok {
		t.Error("With changed the defaults")
	}
	for _, tt := range []struct {
		cfg  []string
		want string
	}{
		{[]string{"prod"}, "want NAME=KIND"},
		{[]string{"=project"}, "want NAME=KIND"},
		{[]string{"prod=project", "prod=sandbox"}, "named twice"},
		{[]string{"prod=production"}, `unknown kind "production"`},
		{[]string{"Prod=project"}, "name must match"},
		{[]string{"public=sandbox"}, "already of kind"},
	} {
		if _, err := ParseEnvironments(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseEnvironments(%q) = %v, want error containing %q", tt.cfg, err, tt.want)
		}
	}
}
