package connlimit_test

import (
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/connlimit"
)

// pipes is a listener whose connections the test hands it, one per Accept.
type pipes struct {
	next chan net.Conn
}

func (p pipes) Accept() (net.Conn, error) {
	c, ok := <-p.next
	if !ok {
		return nil, net.ErrClosed
	}
	return c, nil
}
func (p pipes) Close() error   { return nil }
func (p pipes) Addr() net.Addr { return &net.TCPAddr{} }

// closed reports whether the server side of a pipe was closed: a write to the client side
// then fails with io.ErrClosedPipe, where an open one times out (nobody reads it).
func closed(client net.Conn) bool {
	_ = client.SetWriteDeadline(time.Now().Add(time.Millisecond))
	_, err := client.Write([]byte{0})
	return errors.Is(err, io.ErrClosedPipe)
}

// TestEvictsTheLongestIdle drives the connection states by hand (as http.Server would), so the
// order is exact: the connection idle longest yields before one idle since later, an idle one
// before one that has sent nothing, and a busy one never.
func TestEvictsTheLongestIdle(t *testing.T) {
	src := pipes{next: make(chan net.Conn, 1)}
	ln := connlimit.New(src, 3)
	accept := func() (server, client net.Conn) {
		t.Helper()
		s, c := net.Pipe()
		src.next <- s
		got, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		return got, c
	}
	a, ac := accept()
	b, bc := accept()
	c, cc := accept()
	ln.ConnState(b, http.StateIdle) // b idles first, then a; c has sent nothing
	ln.ConnState(a, http.StateActive)
	ln.ConnState(a, http.StateIdle)
	_, dc := accept()
	if !closed(bc) || closed(ac) || closed(cc) {
		t.Fatalf("evicted: a %v b %v c %v; want b, the longest idle", closed(ac), closed(bc), closed(cc))
	}
	ln.ConnState(a, http.StateActive) // busy: never a victim
	_, ec := accept()
	if !closed(cc) || closed(ac) || closed(dc) {
		t.Fatalf("evicted: a %v c %v d %v; want c, the longest silent (no idle one left, a busy)", closed(ac), closed(cc), closed(dc))
	}
	_, _ = c, ec
}
