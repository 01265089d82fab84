// Package connlimit bounds the client connections a server holds open at once without letting
// idle ones lock new clients out: at the bound, a new connection closes the connection that
// has waited longest without a request in flight (idle between requests, or accepted and
// silent), instead of waiting for it to time out.
package connlimit

import (
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"time"
)

// Listener accepts at most Max connections at once. Its ConnState must be the http.Server's
// ConnState: it tells the listener which connections are idle.
type Listener struct {
	net.Listener
	max int

	mu    sync.Mutex
	conns map[*conn]struct{}
	// freed is signalled when a connection closes or goes idle: a waiting Accept looks again.
	freed  chan struct{}
	closed chan struct{}
	close  sync.Once
}

// New wraps inner to hold at most max connections (max >= 1).
func New(inner net.Listener, max int) *Listener {
	return &Listener{Listener: inner, max: max, conns: map[*conn]struct{}{},
		freed: make(chan struct{}, 1), closed: make(chan struct{})}
}

// conn is an accepted connection; its slot is freed by its first Close.
type conn struct {
	net.Conn
	l     *Listener
	once  sync.Once
	state http.ConnState // guarded by l.mu
	since time.Time      // when it entered state; guarded by l.mu
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
		c.l.signal()
	})
	return err
}

// Accept waits for a connection, then for a slot: a free one, or one taken from the
// connection idle longest (closed). When every connection has a request in flight it waits
// for one to end or go idle.
func (l *Listener) Accept() (net.Conn, error) {
	inner, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	c := &conn{Conn: inner, l: l, state: http.StateNew, since: time.Now()}
	for {
		l.mu.Lock()
		if len(l.conns) < l.max {
			l.conns[c] = struct{}{}
			l.mu.Unlock()
			return c, nil
		}
		victim := l.evictable()
		l.mu.Unlock()
		if victim != nil {
			_ = victim.Close()
			continue
		}
		select {
		case <-l.freed:
		case <-l.closed:
			_ = inner.Close()
			return nil, net.ErrClosed
		}
	}
}

// evictable is the connection idle longest, else the one accepted longest ago that has sent
// nothing yet; nil when every connection has a request in flight. l.mu is held.
func (l *Listener) evictable() *conn {
	var idle, silent *conn
	for c := range l.conns {
		switch c.state {
		case http.StateIdle:
			if idle == nil || c.since.Before(idle.since) {
				idle = c
			}
		case http.StateNew:
			if silent == nil || c.since.Before(silent.since) {
				silent = c
			}
		}
	}
	if idle != nil {
		return idle
	}
	return silent
}

// ConnState records a connection's state (http.Server.ConnState).
func (l *Listener) ConnState(nc net.Conn, s http.ConnState) {
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	c, ok := nc.(*conn)
	if !ok {
		return
	}
	l.mu.Lock()
	c.state, c.since = s, time.Now()
	l.mu.Unlock()
	if s == http.StateIdle {
		l.signal()
	}
}

func (l *Listener) signal() {
	select {
	case l.freed <- struct{}{}:
	default:
	}
}

// Close closes the inner listener and ends a waiting Accept.
func (l *Listener) Close() error {
	l.close.Do(func() { close(l.closed) })
	return l.Listener.Close()
}
