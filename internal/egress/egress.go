// Package egress decides which addresses the gateway may connect to on behalf of what the
// API accepted (provider invocation URLs, binding base URLs, MCP server URLs), and builds the
// one outbound HTTP client every runner and connector uses.
//
// The check runs twice: at submit time on a URL whose host is a literal address (in any
// notation a resolver would accept: decimal, octal, hex, short forms, IPv4-mapped IPv6,
// zones, trailing dots), so a refused literal is a 400 naming the field; and at call time
// on the address actually dialled (net.Dialer.Control), so a hostname that resolves, or is
// rebound, to a refused address is refused too (DenyError, answered as EGRESS_DENIED).
//
// Always refused: unspecified (0.0.0.0/8, ::), link-local (169.254.0.0/16, fe80::/10),
// multicast, broadcast and reserved (240.0.0.0/4), cloud metadata addresses
// (169.254.169.254, fd00:ec2::254, 100.100.100.200), Teredo. Loopback and private ranges
// (10/8, 172.16/12, 192.168/16, 100.64/10, 198.18/15, 192.0.0/24, fc00::/7, fec0::/10) only
// inside an operator-allowed prefix. Addresses embedding an IPv4 address (IPv4-mapped,
// IPv4-compatible, NAT64 64:ff9b::/96, 6to4 2002::/16) are judged by the embedded address.
package egress

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// Codes of egress failures (fault.Error.Code when mapped by a runner).
const (
	CodeDenied   = "EGRESS_DENIED"
	CodeRedirect = "PROVIDER_REDIRECT"
)

// ErrRedirect is what the outbound client answers for a 3xx: redirects are never followed,
// so a body or a bearer token is never re-sent to another address.
var ErrRedirect = errors.New("egress: the provider answered a redirect, which is not followed")

// DenyError is a refused destination. It names the address and why, never a URL (URLs of
// some providers carry a credential).
type DenyError struct {
	Addr   string
	Reason string
}

func (e *DenyError) Error() string {
	return fmt.Sprintf("egress to %s refused: %s", e.Addr, e.Reason)
}

func mustPrefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(ss))
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

var (
	metadata = mustPrefixes("169.254.169.254/32", "fd00:ec2::254/128", "100.100.100.200/32", "169.254.170.2/32")
	never    = []struct {
		prefixes []netip.Prefix
		reason   string
	}{
		{mustPrefixes("0.0.0.0/8", "::/128"), "unspecified address"},
		{mustPrefixes("169.254.0.0/16", "fe80::/10"), "link-local address"},
		{mustPrefixes("224.0.0.0/4", "ff00::/8"), "multicast address"},
		{mustPrefixes("240.0.0.0/4"), "reserved or broadcast address"},
		{mustPrefixes("2001::/32"), "Teredo address (its IPv4 destination is hidden)"},
	}
	loopback = mustPrefixes("127.0.0.0/8", "::1/128")
	private  = mustPrefixes("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "198.18.0.0/15",
		"192.0.0.0/24", "fc00::/7", "fec0::/10")
	nat64 = netip.MustParsePrefix("64:ff9b::/96")
	sixTo = netip.MustParsePrefix("2002::/16")
	v4c   = netip.MustParsePrefix("::/96")
)

// Loopback is the allow-list entries for loopback (the development default).
func Loopback() []netip.Prefix { return append([]netip.Prefix(nil), loopback...) }

// Policy is the egress decision: the operator-allowed prefixes for loopback and private
// addresses. The zero Policy allows public addresses only.
type Policy struct {
	allow []netip.Prefix
	// IdlePerHost and Idle size the idle pools of the transports the policy makes: the
	// connections kept open to one host, and to all. They should be at least the calls the
	// gateway lets run at once to one provider and in all: beyond the pool, every call that
	// finds no idle connection opens one (a TCP handshake) and closes it after (a TIME_WAIT
	// socket left behind). 0 is DefaultIdlePerHost, DefaultIdle.
	IdlePerHost, Idle int
}

// The idle pool sizes of a Policy that sets none.
const (
	DefaultIdlePerHost = 64
	DefaultIdle        = 256
)

// SizePools sizes the idle pools for the calls the gateway lets run at once: perProvider to
// one provider, inflight in all (0: unbounded, which keeps the default size). The pool of
// all is never smaller than the pool of one.
func (p *Policy) SizePools(inflight, perProvider int) {
	p.IdlePerHost = perProvider
	p.Idle = max(cmp.Or(inflight, DefaultIdle), cmp.Or(perProvider, DefaultIdlePerHost))
}

// New returns a policy allowing the given prefixes (within loopback and private ranges;
// an always-refused address stays refused whatever is allowed).
func New(allow []netip.Prefix) *Policy {
	p := &Policy{}
	for _, a := range allow {
		p.allow = append(p.allow, normPrefix(a))
	}
	return p
}

func normPrefix(p netip.Prefix) netip.Prefix {
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96).Masked()
	}
	return p.Masked()
}

// ParseAllow parses --egress-allow values: CIDRs or single addresses.
func ParseAllow(values []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(values))
	for _, v := range values {
		v = strings.TrimSpace(v)
		if p, err := netip.ParsePrefix(v); err == nil {
			out = append(out, p)
			continue
		}
		a, err := netip.ParseAddr(v)
		if err != nil || a.Zone() != "" {
			return nil, fmt.Errorf("egress allow %q: want a CIDR such as 10.0.0.0/8 or an address", v)
		}
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// Allowed lists the allowed prefixes.
func (p *Policy) Allowed() []netip.Prefix { return append([]netip.Prefix(nil), p.allow...) }

func in(a netip.Addr, ps []netip.Prefix) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// embedded is the IPv4 address an IPv6 address carries, when it carries one routably.
func embedded(a netip.Addr) (netip.Addr, bool) {
	if !a.Is6() {
		return netip.Addr{}, false
	}
	b := a.As16()
	switch {
	case a.Is4In6():
		return a.Unmap(), true
	case nat64.Contains(a), v4c.Contains(a) && a != netip.IPv6Unspecified() && a != netip.IPv6Loopback():
		return netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}), true
	case sixTo.Contains(a):
		return netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}), true
	}
	return netip.Addr{}, false
}

// Check decides one address. A nil error allows it.
func (p *Policy) Check(a netip.Addr) error {
	if !a.IsValid() {
		return &DenyError{Addr: "invalid", Reason: "not an address"}
	}
	a = a.WithZone("")
	shown := a.String()
	if v4, ok := embedded(a); ok {
		if err := p.check(v4); err != nil {
			err.Addr = shown
			return err
		}
		// An embedded address is allowed only as its IPv4 form is; an allowed private
		// IPv4 range is not reached through a NAT64 or 6to4 relay.
		if a.Is4In6() {
			return nil
		}
		if in(v4, loopback) || in(v4, private) {
			return &DenyError{Addr: shown, Reason: "IPv6 address embedding a non-public IPv4 address"}
		}
		return nil
	}
	if err := p.check(a); err != nil {
		return err
	}
	return nil
}

func (p *Policy) check(a netip.Addr) *DenyError {
	if in(a, metadata) {
		return &DenyError{Addr: a.String(), Reason: "cloud metadata address"}
	}
	for _, n := range never {
		if in(a, n.prefixes) {
			return &DenyError{Addr: a.String(), Reason: n.reason}
		}
	}
	switch {
	case in(a, loopback):
		if !in(a, p.allow) {
			return &DenyError{Addr: a.String(), Reason: "loopback address not allowed (xema serve --egress-allow)"}
		}
	case in(a, private):
		if !in(a, p.allow) {
			return &DenyError{Addr: a.String(), Reason: "private address not allowed (xema serve --egress-allow)"}
		}
	}
	return nil
}

// CheckHost checks a URL host (without port; brackets allowed). literal reports whether host
// is an address in some notation (or a name that always means loopback, "localhost"); for a
// literal the error is the decision. A host that is neither a literal nor a valid DNS name
// (e.g. an all-numeric last label that no notation parses) is refused: when in doubt, refuse.
func (p *Policy) CheckHost(host string) (literal bool, err error) {
	a, kind := ParseHost(host)
	switch kind {
	case HostName:
		return false, nil
	case HostLiteral:
		return true, p.Check(a)
	case HostLocalhost:
		return true, p.Check(netip.MustParseAddr("127.0.0.1"))
	}
	return true, &DenyError{Addr: clip(host), Reason: "host is neither an address nor a valid DNS name"}
}

// IsLoopbackHost reports whether host is a loopback literal or localhost.
func IsLoopbackHost(host string) bool {
	a, kind := ParseHost(host)
	switch kind {
	case HostLocalhost:
		return true
	case HostLiteral:
		if v4, ok := embedded(a); ok {
			a = v4
		}
		return a.IsLoopback()
	}
	return false
}

// CheckURL checks a URL the API accepted: an absolute http(s) URL whose host, when it is an
// address literal, the policy allows. credential says the URL will receive a credential or
// the gateway's token: then it must be https, or http to an allowed loopback address.
// The message never quotes the URL.
func (p *Policy) CheckURL(raw string, credential bool) string {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "must be an absolute http or https URL"
	}
	host := u.Hostname()
	literal, err := p.CheckHost(host)
	if err != nil {
		var de *DenyError
		if errors.As(err, &de) {
			return "egress refused: " + de.Reason
		}
		return "egress refused"
	}
	if port := u.Port(); port != "" {
		for _, c := range port {
			if c < '0' || c > '9' {
				return "has an invalid port"
			}
		}
	}
	if credential && u.Scheme == "http" && !(literal && IsLoopbackHost(host)) {
		return "must be https: it receives a credential or the gateway's token (plain http only to an allowed loopback address)"
	}
	return ""
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// Control is a net.Dialer.Control refusing every connection to an address the policy
// refuses. It sees the address actually connected to, after name resolution.
func (p *Policy) Control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &DenyError{Addr: clip(address), Reason: "unparsable dial address"}
	}
	if err := p.Check(ap.Addr()); err != nil {
		return err
	}
	return nil
}

// Dialer is a net.Dialer whose every connection passes Control.
func (p *Policy) Dialer() *net.Dialer {
	return &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second, Control: p.Control}
}

// Transport is an http.Transport dialling through Dialer, with no proxy (a proxy would be
// the address checked, not the destination).
func (p *Policy) Transport() *http.Transport {
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           p.Dialer().DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          cmp.Or(p.Idle, DefaultIdle),
		MaxIdleConnsPerHost:   cmp.Or(p.IdlePerHost, DefaultIdlePerHost),
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// NoRedirect is an http.Client.CheckRedirect that follows nothing.
func NoRedirect(*http.Request, []*http.Request) error { return ErrRedirect }

// Client is an http.Client over rt (nil: a new Transport) that follows no redirects.
func (p *Policy) Client(rt http.RoundTripper) *http.Client {
	if rt == nil {
		rt = p.Transport()
	}
	return &http.Client{Transport: rt, CheckRedirect: NoRedirect}
}

// Denied reports whether err is (or wraps) an egress refusal, and returns it.
func Denied(err error) (*DenyError, bool) {
	var de *DenyError
	ok := errors.As(err, &de)
	return de, ok
}

// Redirected reports whether err is the refusal of a redirect.
func Redirected(err error) bool { return errors.Is(err, ErrRedirect) }
