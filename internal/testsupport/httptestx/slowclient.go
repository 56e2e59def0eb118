package httptestx

import (
	"fmt"
	"io"
	"net"
	"testing"
	"time"
)

// SlowClient dials the HTTP server at addr and sends the head of a
// request, POST /orders with head's header lines (each ending in CRLF)
// after Host, and no body. If drip is not empty, it then sends drip each
// time every has passed, until the test ends or a write fails. The connection has a
// read deadline 10 s on, so that a server that hangs fails the test
// instead of blocking it, and is closed when the test ends.
func SlowClient(t testing.TB, addr, head, drip string, every time.Duration) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := fmt.Fprintf(conn, "POST /orders HTTP/1.1\r\nHost: x\r\n%s\r\n", head); err != nil {
		t.Fatal(err)
	}
	if drip != "" {
		stop := make(chan struct{})
		t.Cleanup(func() { close(stop) })
		go func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(every):
					if _, err := io.WriteString(conn, drip); err != nil {
						return
					}
				}
			}
		}()
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	return conn
}
