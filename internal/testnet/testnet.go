// Package testnet holds the network helpers the tests share: a free loopback port for a
// server a test starts as another process.
package testnet

import (
	"fmt"
	"net"
	"testing"
)

// Port is a TCP port on 127.0.0.1 that was free a moment ago: the listener that found it is
// closed before Port returns, so another process may take it (tests start their servers on it
// at once and fail if it is taken).
func Port() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// FreePort is Port for a test: it fails t when no port can be had.
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := Port()
	if err != nil {
		t.Fatal(err)
	}
	return p
}
