package egress

import (
	"net/netip"
	"strconv"
	"strings"
)

// HostKind is what ParseHost found.
type HostKind int

// Kinds of host.
const (
	HostInvalid   HostKind = iota // neither an address nor a valid DNS name: refuse
	HostLiteral                   // an address, in some notation
	HostLocalhost                 // "localhost" or a name under it: always loopback
	HostName                      // a DNS name: decided on the address dialled
)

// ParseHost reads a URL host the way resolvers do: brackets and an IPv6 zone are stripped,
// one trailing dot is ignored, IPv4 is read in inet_aton's notations (1 to 4 parts, each
// decimal, octal with a leading 0, or hex with 0x; the last part fills the remaining bytes:
// 2852039166, 0251.0376.0251.0376, 0xa9fea9fe, 127.1). A host whose last label starts
// with a digit must be such a literal: no DNS name ends in a numeric label.
func ParseHost(host string) (netip.Addr, HostKind) {
	h := host
	if strings.HasPrefix(h, "[") {
		if !strings.HasSuffix(h, "]") {
			return netip.Addr{}, HostInvalid
		}
		h = h[1 : len(h)-1]
		a, err := netip.ParseAddr(h)
		if err != nil || !a.Is6() {
			return netip.Addr{}, HostInvalid
		}
		return a.WithZone(""), HostLiteral
	}
	if strings.Contains(h, ":") {
		a, err := netip.ParseAddr(h)
		if err != nil || !a.Is6() {
			return netip.Addr{}, HostInvalid
		}
		return a.WithZone(""), HostLiteral
	}
	if strings.Contains(h, "%") { // a zone on something not IPv6, or a stray escape
		return netip.Addr{}, HostInvalid
	}
	h = strings.TrimSuffix(h, ".")
	if h == "" || len(h) > 253 {
		return netip.Addr{}, HostInvalid
	}
	for i := 0; i < len(h); i++ {
		if h[i] >= 0x80 || h[i] <= ' ' {
			return netip.Addr{}, HostInvalid // IDN must come as punycode; no controls, no spaces
		}
	}
	lower := strings.ToLower(h)
	if a, ok := parseInetAton(lower); ok {
		return a, HostLiteral
	}
	labels := strings.Split(lower, ".")
	last := labels[len(labels)-1]
	if last == "" || (last[0] >= '0' && last[0] <= '9') {
		return netip.Addr{}, HostInvalid
	}
	for _, l := range labels {
		if !validLabel(l) {
			return netip.Addr{}, HostInvalid
		}
	}
	if last == "localhost" || lower == "localhost" {
		return netip.Addr{}, HostLocalhost
	}
	return netip.Addr{}, HostName
}

func validLabel(l string) bool {
	if l == "" || len(l) > 63 {
		return false
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// parseInetAton reads IPv4 in every notation inet_aton accepts.
func parseInetAton(s string) (netip.Addr, bool) {
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	vals := make([]uint64, len(parts))
	for i, p := range parts {
		v, ok := parsePart(p)
		if !ok {
			return netip.Addr{}, false
		}
		vals[i] = v
	}
	var n uint64
	last := len(vals) - 1
	for i := 0; i < last; i++ {
		if vals[i] > 0xff {
			return netip.Addr{}, false
		}
		n |= vals[i] << (8 * (3 - i))
	}
	if max := uint64(1)<<(8*(4-last)) - 1; vals[last] > max {
		return netip.Addr{}, false
	}
	n |= vals[last]
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}), true
}

func parsePart(p string) (uint64, bool) {
	if p == "" || len(p) > 34 {
		return 0, false
	}
	base := 10
	digits := p
	switch {
	case strings.HasPrefix(p, "0x"):
		base, digits = 16, p[2:]
		if digits == "" {
			return 0, true // inet_aton reads "0x" as 0
		}
	case len(p) > 1 && p[0] == '0':
		base, digits = 8, p[1:]
	}
	v, err := strconv.ParseUint(digits, base, 64)
	if err != nil || v > 0xffffffff {
		return 0, false
	}
	return v, true
}
