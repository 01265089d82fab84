package egress

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

func policy(t *testing.T, allow ...string) *Policy {
	t.Helper()
	ps, err := ParseAllow(allow)
	if err != nil {
		t.Fatal(err)
	}
	return New(ps)
}

// TestCheckHost: every notation of an address is judged as the address; names are left to
// the dialer; what is neither is refused.
func TestCheckHost(t *testing.T) {
	prod := policy(t)
	dev := New(Loopback())
	private := policy(t, "10.0.0.0/8", "127.0.0.1", "fc00::/7", "100.64.0.0/10")
	tests := []struct {
		host    string
		literal bool
		prod    bool // allowed with no allow-list
		dev     bool // allowed with loopback allowed
		private bool // allowed with 10/8, 127.0.0.1, fc00::/7, 100.64/10
	}{
		{"example.com", false, true, true, true},
		{"example.com.", false, true, true, true},
		{"1e100.net", false, true, true, true},
		{"8.8.8.8", true, true, true, true},
		{"[2001:4860:4860::8888]", true, true, true, true},
		{"134744072", true, true, true, true}, // 8.8.8.8 in decimal
		// cloud metadata in every notation: always refused
		{"169.254.169.254", true, false, false, false},
		{"169.254.169.254.", true, false, false, false},
		{"2852039166", true, false, false, false},
		{"0xa9fea9fe", true, false, false, false},
		{"0XA9FEA9FE", true, false, false, false},
		{"0251.0376.0251.0376", true, false, false, false},
		{"0xa9.0xfe.0xa9.0xfe", true, false, false, false},
		{"169.254.43518", true, false, false, false},
		{"169.16689662", true, false, false, false},
		{"[::ffff:169.254.169.254]", true, false, false, false},
		{"[::ffff:a9fe:a9fe]", true, false, false, false},
		{"[64:ff9b::169.254.169.254]", true, false, false, false},
		{"[2002:a9fe:a9fe::1]", true, false, false, false},
		{"[fd00:ec2::254]", true, false, false, false},
		{"100.100.100.200", true, false, false, false},
		{"[fe80::1%25eth0]", true, false, false, false},
		{"fe80::1%eth0", true, false, false, false},
		{"169.254.1.1", true, false, false, false},
		{"0.0.0.0", true, false, false, false},
		{"0", true, false, false, false},
		{"[::]", true, false, false, false},
		{"224.0.0.1", true, false, false, false},
		{"[ff02::1]", true, false, false, false},
		{"255.255.255.255", true, false, false, false},
		{"[2001:0:4136:e378:8000:63bf:3fff:fdd2]", true, false, false, false},
		// loopback
		{"127.0.0.1", true, false, true, true},
		{"127.1", true, false, true, true},
		{"127.0.0.2", true, false, true, false},
		{"2130706433", true, false, true, true},
		{"0x7f000001", true, false, true, true},
		{"017700000001", true, false, true, true},
		{"[::1]", true, false, true, false},
		{"[::ffff:127.0.0.1]", true, false, true, true},
		{"localhost", true, false, true, true},
		{"LOCALHOST.", true, false, true, true},
		{"api.localhost", true, false, true, true},
		{"[64:ff9b::127.0.0.1]", true, false, false, false},
		// private
		{"10.1.2.3", true, false, false, true},
		{"012.1.2.3", true, false, false, true},
		{"172.16.0.1", true, false, false, false},
		{"192.168.1.1", true, false, false, false},
		{"100.64.0.1", true, false, false, true},
		{"[fc00::1]", true, false, false, true},
		{"[fd12:3456::1]", true, false, false, true},
		{"[::ffff:10.0.0.1]", true, false, false, true},
		// private addresses embedded in NAT64 and 6to4: refused whatever the allow-list
		// (the embedded address is judged, and only a public one passes)
		{"[64:ff9b::10.0.0.1]", true, false, false, false},
		{"[64:ff9b::a00:1]", true, false, false, false},
		{"[2002:a00:1::1]", true, false, false, false},
		{"[64:ff9b::192.168.1.1]", true, false, false, false},
		{"[2002:ac10:1::1]", true, false, false, false},
		{"[64:ff9b::100.64.0.1]", true, false, false, false},
		{"[64:ff9b::8.8.8.8]", true, true, true, true},
		{"[2002:808:808::1]", true, true, true, true},
		// neither an address nor a name: refused
		{"1.2.3.4.5", true, false, false, false},
		{"256.1.1.1", true, false, false, false},
		{"4294967296", true, false, false, false},
		{"0x1g", true, false, false, false},
		{"09.1.1.1", true, false, false, false},
		{"example.123", true, false, false, false},
		{"ex ample.com", true, false, false, false},
		{"exämple.com", true, false, false, false},
		{"", true, false, false, false},
		{"[1.2.3.4]", true, false, false, false},
		{"[::1", true, false, false, false},
		{"a..b", true, false, false, false},
	}
	for _, tc := range tests {
		for name, c := range map[string]struct {
			p    *Policy
			want bool
		}{"prod": {prod, tc.prod}, "dev": {dev, tc.dev}, "private": {private, tc.private}} {
			literal, err := c.p.CheckHost(tc.host)
			if literal != tc.literal || (err == nil) != c.want {
				t.Errorf("%s policy, host %q: literal %v err %v; want literal %v allowed %v", name, tc.host, literal, err, tc.literal, c.want)
			}
		}
	}
}

func TestCheckURL(t *testing.T) {
	dev := New(Loopback())
	tests := []struct {
		url        string
		credential bool
		wantOK     bool
	}{
		{"https://api.example.com/x", true, true},
		{"http://api.example.com/x", false, true},
		{"http://api.example.com/x", true, false},
		{"http://127.0.0.1:8080/x", true, true},
		{"http://[::1]:8080/x", true, true},
		{"http://localhost:8080/x", true, true},
		{"http://169.254.169.254/latest/meta-data", false, false},
		{"http://2852039166/", false, false},
		{"https://[::ffff:169.254.169.254]/", false, false},
		{"http://%31%36%39.254.169.254/", false, false},
		{"ftp://example.com/", false, false},
		{"/relative", false, false},
		{"http://10.0.0.1/", false, false},
	}
	for _, tc := range tests {
		msg := dev.CheckURL(tc.url, tc.credential)
		if (msg == "") != tc.wantOK {
			t.Errorf("CheckURL(%q, %v) = %q, want ok %v", tc.url, tc.credential, msg, tc.wantOK)
		}
		if strings.Contains(msg, "169.254") {
			t.Errorf("message quotes the URL: %q", msg)
		}
	}
}

func TestParseAllow(t *testing.T) {
	if _, err := ParseAllow([]string{"10.0.0.0/8", "::1", "192.168.1.7"}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"10.0.0.0/33", "example.com", "fe80::1%eth0", ""} {
		if _, err := ParseAllow([]string{bad}); err == nil {
			t.Errorf("ParseAllow(%q) accepted", bad)
		}
	}
	// An allow-list entry never opens an always-refused address.
	p := policy(t, "169.254.0.0/16", "0.0.0.0/0", "::/0")
	for _, a := range []string{"169.254.169.254", "100.100.100.200", "fd00:ec2::254", "::ffff:169.254.169.254", "0.0.0.0"} {
		if err := p.Check(netip.MustParseAddr(a)); err == nil {
			t.Errorf("%s allowed by an allow-list", a)
		}
	}
	// An IPv4-mapped allow entry is its IPv4 prefix.
	p = policy(t, "::ffff:10.0.0.0/104")
	if err := p.Check(netip.MustParseAddr("10.9.9.9")); err != nil {
		t.Errorf("mapped allow entry: %v", err)
	}
}

// TestDialerRefusesAddressDialled: a name resolving to a refused address, a literal, and an
// IPv4-mapped literal are refused by Control, before any byte is sent.
func TestDialerRefusesAddressDialled(t *testing.T) {
	var got atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got.Add(1) }))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	_, port, _ := net.SplitHostPort(u.Host)
	c := New(nil).Client(nil)
	for _, target := range []string{srv.URL, "http://localhost:" + port, "http://[::ffff:127.0.0.1]:" + port} {
		resp, err := c.Get(target)
		if err == nil {
			resp.Body.Close()
			t.Fatalf("%s: connected", target)
		}
		if de, ok := Denied(err); !ok || !strings.Contains(de.Reason, "loopback") {
			t.Fatalf("%s: %v, want a loopback DenyError", target, err)
		}
	}
	if got.Load() != 0 {
		t.Fatalf("the server got %d request(s) through a refusing policy", got.Load())
	}
	// The development policy connects.
	resp, err := New(Loopback()).Client(nil).Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

// TestNoRedirect: a 307 is not followed; the second server gets nothing.
func TestNoRedirect(t *testing.T) {
	second := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { t.Errorf("redirect followed") }))
	defer second.Close()
	first := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, second.URL, http.StatusTemporaryRedirect)
	}))
	defer first.Close()
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, first.URL, strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer secret")
	resp, err := New(Loopback()).Client(nil).Do(req)
	if err == nil {
		resp.Body.Close()
	}
	if !Redirected(err) || !errors.Is(err, ErrRedirect) {
		t.Fatalf("err %v, want ErrRedirect", err)
	}
}

// FuzzCheck: whatever the notation, a host that parses to an address is judged exactly as
// that address, and the checker never allows what a resolver would read as an
// always-refused address.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{"169.254.169.254", "2852039166", "0251.0376.0251.0376", "0xa9fea9fe", "169.254.169.254.",
		"[::ffff:169.254.169.254]", "::ffff:a9fe:a9fe", "[fe80::1%25eth0]", "127.1", "0", "[::]", "localhost.",
		"[64:ff9b::a9fe:a9fe]", "100.100.100.200", "fd00:ec2::254", "example.com", "10.0.0.1", "0x7f.1"} {
		f.Add(s)
	}
	prod, dev := New(nil), New(Loopback())
	f.Fuzz(func(t *testing.T, host string) {
		for _, p := range []*Policy{prod, dev} {
			literal, err := p.CheckHost(host)
			a, kind := ParseHost(host)
			if kind == HostLiteral {
				if !literal || (err == nil) != (p.Check(a) == nil) {
					t.Fatalf("%q: literal %v err %v, but the address %s checks %v", host, literal, err, a, p.Check(a))
				}
				if v4, ok := embedded(a); ok {
					a = v4
				}
				if err == nil && (in(a, metadata) || a.IsLinkLocalUnicast() || a.IsMulticast() || a.IsUnspecified() ||
					(p == prod && (a.IsLoopback() || a.IsPrivate()))) {
					t.Fatalf("%q (%s) allowed", host, a)
				}
			}
			if kind == HostName && literal {
				t.Fatalf("%q: a name reported as a literal", host)
			}
			if kind == HostInvalid && err == nil {
				t.Fatalf("%q: invalid host allowed", host)
			}
			// Cross-check with the standard library: what net.ParseIP reads must be judged the same.
			inner := host
			if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
				inner = host[1 : len(host)-1]
			}
			if ip := net.ParseIP(inner); ip != nil && !strings.ContainsAny(inner, "%[]") && (inner == host || strings.Contains(inner, ":")) {
				std, _ := netip.AddrFromSlice(ip)
				if (p.Check(std) == nil) != (err == nil) {
					t.Fatalf("%q: std reads %s (check %v), CheckHost %v", host, std, p.Check(std), err)
				}
			}
		}
	})
}

// TestTransportKeepsIdlePerHost: a round of n calls in flight at once to one host, then a
// second, open n connections in all when the policy keeps n idle per host; a pool smaller
// than n (the 16 kept before) opens new ones in every round.
func TestTransportKeepsIdlePerHost(t *testing.T) {
	const n = 40
	for _, tc := range []struct {
		name      string
		perHost   int
		wantConns int64
	}{
		{"kept for every call in flight", n, n},
		{"the default keeps them too", 0, n},
		{"a smaller pool", 16, 2*n - 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var opened atomic.Int64
			var arrived sync.WaitGroup
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				arrived.Done()
				arrived.Wait() // every call of the round holds its connection until all arrived
			}))
			srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					opened.Add(1)
				}
			}
			srv.Start()
			defer srv.Close()
			p := New(Loopback())
			p.IdlePerHost = tc.perHost
			c := p.Client(nil)
			defer c.CloseIdleConnections()
			for round := range 2 {
				arrived.Add(n)
				var calls sync.WaitGroup
				for range n {
					calls.Go(func() {
						resp, err := c.Get(srv.URL)
						if err != nil {
							t.Errorf("round %d: %v", round, err)
							return
						}
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					})
				}
				calls.Wait()
			}
			if got := opened.Load(); got != tc.wantConns {
				t.Fatalf("%d connections opened over two rounds of %d calls, want %d", got, n, tc.wantConns)
			}
		})
	}
}

// TestSizePools: the transport's pools follow the in-flight limits; an unbounded limit (0)
// keeps the default, and the pool of all never falls below the pool of one.
func TestSizePools(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		inflight, perProvider  int
		wantPerHost, wantTotal int
	}{
		{"the serve defaults", 256, 64, 64, 256},
		{"both unbounded", 0, 0, DefaultIdlePerHost, DefaultIdle},
		{"in-flight unbounded", 0, 500, 500, 500},
		{"per provider unbounded", 32, 0, DefaultIdlePerHost, DefaultIdlePerHost},
		{"per provider above in-flight", 32, 128, 128, 128},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := New(nil)
			p.SizePools(tc.inflight, tc.perProvider)
			tr := p.Transport()
			if tr.MaxIdleConnsPerHost != tc.wantPerHost || tr.MaxIdleConns != tc.wantTotal {
				t.Fatalf("idle per host %d, in all %d; want %d, %d", tr.MaxIdleConnsPerHost, tr.MaxIdleConns, tc.wantPerHost, tc.wantTotal)
			}
		})
	}
}
