package testnet

import (
	"fmt"
	"net"
	"testing"
)

// TestFreePort: the port is on loopback, non-zero, and can be listened on.
func TestFreePort(t *testing.T) {
	p := FreePort(t)
	if p <= 0 || p > 65535 {
		t.Fatalf("port %d", p)
	}
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
	if err != nil {
		t.Fatalf("listen on the free port: %v", err)
	}
	l.Close()
}
