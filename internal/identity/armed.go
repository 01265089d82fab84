package identity

import (
	"fmt"
	"regexp"
	"strings"
)

// armedPattern is the shape of a ref glob: "*" alone, or "domain:path[@major]" where each part
// may use the glob characters * and ? (e.g. "acme:*", "kb:page.*@1", "kb:page.read@1").
var armedPattern = regexp.MustCompile(`^(\*|[a-z*?][a-z0-9*?-]*:[a-z*?][a-z0-9*?-]*(\.[a-z*?][a-z0-9*?-]*)*(@(\*|[0-9]+))?)$`)

// ValidateArmed checks that every pattern looks like a capability ref glob.
func ValidateArmed(patterns []string) error {
	for _, p := range patterns {
		if len(p) > 200 || !armedPattern.MatchString(p) {
			return fmt.Errorf("armed pattern %q is not a ref glob (want \"*\" or domain:path[@major] with * or ?, e.g. \"acme:*\")", truncate(p, 60))
		}
		if strings.Contains(p, "***") {
			return fmt.Errorf("armed pattern %q has a run of three or more *", truncate(p, 60))
		}
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
