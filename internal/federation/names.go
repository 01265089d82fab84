package federation

import (
	"fmt"
	"strings"
	"unicode"
)

// ToolName maps an MCP tool name to the name part of its capability ref, by the rule of
// docs/federation.md: split camelCase with '-', lowercase, every character outside [a-z0-9]
// becomes '-', runs of '-' collapse, '-' is trimmed from both ends, and a result that does
// not start with a letter is prefixed with "t-". A name with no letter or digit at all has
// no mapping.
func ToolName(name string) (string, error) {
	rs := []rune(name)
	var b strings.Builder
	for i, r := range rs {
		if unicode.IsUpper(r) && i > 0 {
			prev := rs[i-1]
			nextLower := i+1 < len(rs) && unicode.IsLower(rs[i+1])
			if unicode.IsLower(prev) || unicode.IsDigit(prev) || (unicode.IsUpper(prev) && nextLower) {
				b.WriteByte('-')
			}
		}
		r = unicode.ToLower(r)
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	var out strings.Builder
	for _, r := range b.String() {
		if r == '-' && (out.Len() == 0 || strings.HasSuffix(out.String(), "-")) {
			continue
		}
		out.WriteRune(r)
	}
	s := strings.TrimRight(out.String(), "-")
	if s == "" {
		return "", fmt.Errorf("tool name %q has no letter or digit to name a capability by", name)
	}
	if s[0] < 'a' || s[0] > 'z' {
		s = "t-" + s
	}
	return s, nil
}

// ToolRef is the capability ref of tool name on provider: <provider-id>:<mapped-name>@1.
func ToolRef(provider, name string) (string, error) {
	n, err := ToolName(name)
	if err != nil {
		return "", err
	}
	return provider + ":" + n + "@1", nil
}
