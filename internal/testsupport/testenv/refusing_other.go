//go:build !unix

package testenv

import (
	"net"
	"testing"
)

// RefusingAddr returns a free loopback port and a function that listens on
// it. Outside Unix the port is released in between, so another process
// could take it meanwhile; the test then fails with the listen error.
func RefusingAddr(t testing.TB) (string, func() net.Listener) {
	t.Helper()
	addr := FreeAddr(t)
	return addr, func() net.Listener {
		t.Helper()
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("upstream port %s taken meanwhile: %v", addr, err)
		}
		return l
	}
}
