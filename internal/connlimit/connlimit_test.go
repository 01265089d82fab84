package connlimit_test

import (
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/connlimit"
)

// serve runs an http.Server on a limited loopback listener; handler defaults to "ok".
func serve(t *testing.T, max int, handler http.HandlerFunc) (string, *atomic.Int64) {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := connlimit.New(inner, max)
	served := &atomic.Int64{}
	if handler == nil {
		handler = func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		handler(w, r)
	}), ConnState: ln.ConnState, ReadHeaderTimeout: time.Minute, IdleTimeout: time.Hour}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	return "http://" + inner.Addr().String(), served
}

// client is a keep-alive client of its own: its connection stays open, idle, after a call.
func client() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}, Timeout: 30 * time.Second}
}

func get(t *testing.T, c *http.Client, url string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if b, _ := io.ReadAll(resp.Body); string(b) != "ok" {
		t.Fatalf("answer %q", b)
	}
}

// TestIdleConnectionsYield: connections idle after a request (keep-alive) and connections
// that never sent one hold every slot; a new client is served, many times over, well within
// the idle timeout (an hour here: a wait for it would time the test out).
func TestIdleConnectionsYield(t *testing.T) {
	const max = 4
	url, served := serve(t, max, nil)
	var idle []*http.Client
	for range max / 2 {
		c := client()
		get(t, c, url)
		idle = append(idle, c)
	}
	for range max / 2 {
		s, err := net.Dial("tcp", url[len("http://"):])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
	}
	for range 3 * max {
		get(t, client(), url)
	}
	// The idle clients' connections were closed for the newcomers: they are served again on
	// fresh ones.
	for _, c := range idle {
		get(t, c, url)
	}
	if got := served.Load(); got != int64(max/2+3*max+max/2) {
		t.Fatalf("served %d requests", got)
	}
}

// TestBusyConnectionsAreNotEvicted: a connection with a request in flight keeps its slot;
// the newcomer is served once one of them ends.
func TestBusyConnectionsAreNotEvicted(t *testing.T) {
	release, entered := make(chan struct{}), make(chan struct{}, 2)
	url, _ := serve(t, 2, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-release
		}
		_, _ = io.WriteString(w, "ok")
	})
	done := make(chan error, 2)
	for range 2 {
		go func() {
			resp, err := client().Get(url + "/slow")
			if err == nil {
				_, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			done <- err
		}()
	}
	<-entered
	<-entered
	fast := make(chan error, 1)
	go func() {
		resp, err := client().Get(url)
		if err == nil {
			resp.Body.Close()
		}
		fast <- err
	}()
	close(release)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatalf("a busy connection was cut: %v", err)
		}
	}
	if err := <-fast; err != nil {
		t.Fatalf("the newcomer: %v", err)
	}
}

// counting is the loopback listener under the limit, counting the connections open at once:
// accepted and not yet closed (the limit closes its victims through it).
type counting struct {
	net.Listener
	mu         sync.Mutex
	open, peak int
}

func (l *counting) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.open++
	l.peak = max(l.peak, l.open)
	l.mu.Unlock()
	return &countedConn{Conn: c, l: l}, nil
}

func (l *counting) now() (open, peak int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open, l.peak
}

type countedConn struct {
	net.Conn
	l    *counting
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.open--
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// TestHoldsAtMostMax: however many clients come, idle or silent, no more than max
// connections are open at once: each newcomer beyond max is served only after the limit
// closed another (counted at the listener the limit wraps, when each request is served).
func TestHoldsAtMostMax(t *testing.T) {
	const max = 3
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	counted := &counting{Listener: inner}
	ln := connlimit.New(counted, max)
	var servedAt []int // the connections open as each request was served
	var mu sync.Mutex
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		open, _ := counted.now()
		mu.Lock()
		servedAt = append(servedAt, open)
		mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	}), ConnState: ln.ConnState, ReadHeaderTimeout: time.Minute, IdleTimeout: time.Hour}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	url := "http://" + inner.Addr().String()
	for i := range 3 * max {
		if i%3 == 2 { // a client that connects and says nothing
			s, err := net.Dial("tcp", inner.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
		}
		get(t, client(), url) // stays open, idle
	}
	mu.Lock()
	defer mu.Unlock()
	if _, peak := counted.now(); peak > max+1 || slices.Max(servedAt) > max {
		t.Fatalf("connections open as each request was served: %v (peak accepted %d); want at most %d", servedAt, peak, max)
	}
}
