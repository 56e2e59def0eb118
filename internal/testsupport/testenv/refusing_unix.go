//go:build unix

package testenv

import (
	"net"
	"os"
	"strconv"
	"syscall"
	"testing"
)

// RefusingAddr holds a loopback port that refuses connections (a bound TCP
// socket that does not listen answers a connect with RST), and returns its
// address and a function that starts listening on that same socket. No
// other process can take the port in between, unlike a free port closed
// and listened on again later.
func RefusingAddr(t testing.TB) (string, func() net.Listener) {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	syscall.CloseOnExec(fd) // not held by the children a test starts
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		syscall.Close(fd)
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		syscall.Close(fd)
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "refusing")
	t.Cleanup(func() { f.Close() })
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
	return addr, func() net.Listener {
		t.Helper()
		if err := syscall.Listen(fd, 128); err != nil {
			t.Fatal(err)
		}
		l, err := net.FileListener(f) // a duplicate descriptor
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
}
