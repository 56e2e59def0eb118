package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Regression tests for issue 13 at the process level.

// runServeExit runs `idem serve` expecting it to refuse to start.
func runServeExit(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], append([]string{"serve", "--listen", freeAddr(t)}, args...)...)
	cmd.Env = append(os.Environ(), execEnv+"=1")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Case 9: every bad duration or size is refused at start, naming its flag.
func TestServeRejectsBadFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ flag, value string }{
		{"drain", "-1s"}, {"ttl", "0s"}, {"lease", "-1s"}, {"wait", "-1s"},
		{"max-body", "0"}, {"max-response", "-1"}, {"read-timeout", "0s"},
		{"read-header-timeout", "-1s"}, {"idle-timeout", "0s"}, {"body-timeout", "0s"},
		{"write-timeout", "-1s"}, {"store-timeout", "0s"}, {"max-buffered", "1024"}, {"store-check", "maybe"},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			t.Parallel()
			out, err := runServeExit(t, "--upstream", "http://127.0.0.1:1", "--store", "memory", "--"+tc.flag, tc.value)
			if err == nil || !strings.Contains(out, "--"+tc.flag) {
				t.Fatalf("--%s %s: exit %v, output %q; want a refusal naming the flag", tc.flag, tc.value, err, out)
			}
		})
	}
}

// Case 9: a store nobody listens on is found at start.
func TestServeChecksTheStoreAtStart(t *testing.T) {
	t.Parallel()
	out, err := runServeExit(t, "--upstream", "http://127.0.0.1:1", "--store", "redis://"+freeAddr(t)+"/0")
	if err == nil || !strings.Contains(out, "does not answer") {
		t.Fatalf("redis store down: exit %v, output %q; want a start-up failure", err, out)
	}
}

// Case 3: clients that send headers and then no body, or a byte at a time,
// are cut off once their deadline passes, keyed or not.
func TestServeCutsOffSlowClients(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	p := startServe(t, up.srv.URL, "memory", "--body-timeout", "500ms", "--read-timeout", "1s")
	addr := strings.TrimPrefix(p.url, "http://")
	for _, tc := range []struct {
		name, head string
		drip       bool
	}{
		{"keyed, no body", "Idempotency-Key: k1\r\nContent-Length: 100\r\n", false},
		{"keyed, a byte at a time", "Idempotency-Key: k2\r\nContent-Length: 100000\r\n", true},
		{"unkeyed, no body", "Content-Length: 100\r\n", false},
		{"unkeyed, a byte at a time", "Content-Length: 100000\r\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprintf(conn, "POST /orders HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer a\r\n%s\r\n", tc.head)
			stop := make(chan struct{})
			defer close(stop)
			if tc.drip {
				go func() {
					for {
						select {
						case <-stop:
							return
						case <-time.After(100 * time.Millisecond):
							if _, err := io.WriteString(conn, "x"); err != nil {
								return
							}
						}
					}
				}()
			}
			// Cut off: an answer, then the connection closed. A server that
			// keeps the connection fails at this deadline.
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(conn)
			if res, err := http.ReadResponse(br, nil); err == nil {
				_, _ = io.Copy(io.Discard, res.Body)
				if res.StatusCode < 400 {
					t.Fatalf("slow client answered %d", res.StatusCode)
				}
			}
			if _, err := br.ReadByte(); err == nil || os.IsTimeout(err) {
				t.Fatalf("connection still open after the deadlines: %v", err)
			}
		})
	}
}

// Case 1: the upstream answered 201 and died mid-body: the retry is told
// the response was lost and the upstream does not run again.
func TestServeUpstreamDiesMidBody(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Like a real API, it reads the request before acting. (One that
		// resets the connection while the proxy still sends the body leaves
		// the proxy with a write error and no status: outcome unknown.)
		_, _ = io.Copy(io.Discard, r.Body)
		runs.Add(1)
		conn, buf, _ := http.NewResponseController(w).Hijack()
		fmt.Fprint(buf, "HTTP/1.1 201 Created\r\nContent-Length: 100\r\n\r\n{\"ha")
		_ = buf.Flush()
		_ = conn.(*net.TCPConn).SetLinger(0)
		conn.Close()
	}))
	defer up.Close()
	p := startServe(t, up.URL, "sqlite:"+filepath.Join(t.TempDir(), "idem.db"))
	req, _ := http.NewRequest("POST", p.url+"/charges", strings.NewReader("x"))
	req.Header.Set("Idempotency-Key", "c1")
	req.Header.Set("Authorization", "Bearer a")
	if res, err := client.Do(req); err == nil {
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	r := post(t, p.url, "/charges", "c1", "x", "Authorization", "Bearer a")
	if r.status != 502 || !strings.Contains(r.body, "response-lost") || runs.Load() != 1 {
		t.Fatalf("retry: %d %s; upstream ran %d times, want once", r.status, r.body, runs.Load())
	}
}

// Case 2: with --store-5xx, the proxy's own 502 (upstream not listening) is
// not stored: once the upstream is up, the retry executes.
func TestServeStore5xxDoesNotStoreItsOwn502(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	p := startServe(t, "http://"+addr, "memory", "--store-5xx")
	if r := post(t, p.url, "/orders", "k", "x"); r.status != 502 {
		t.Fatalf("upstream down: %d %s", r.status, r.body)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("port taken meanwhile: %v", err)
	}
	var runs atomic.Int32
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs.Add(1); w.WriteHeader(201) })}
	go func() { _ = up.Serve(l) }()
	defer up.Close()
	if r := post(t, p.url, "/orders", "k", "x"); r.status != 201 || runs.Load() != 1 {
		t.Fatalf("upstream up: %d %s, upstream ran %d times", r.status, r.body, runs.Load())
	}
}

// Case 7: no cross-principal replay by default; the operator's choices.
func TestServeScoping(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	def := startServe(t, up.srv.URL, "memory")
	if r := post(t, def.url, "/orders", "k", "x", "Authorization", "", "Cookie", "sid=alice"); r.status != 400 || !strings.Contains(r.body, "no-principal") {
		t.Fatalf("anonymous keyed request: %d %s", r.status, r.body)
	}
	ck := startServe(t, up.srv.URL, "memory", "--scope-cookie", "sid")
	a := post(t, ck.url, "/orders", "k", "x", "Authorization", "", "Cookie", "sid=alice")
	b := post(t, ck.url, "/orders", "k", "x", "Authorization", "", "Cookie", "sid=bob")
	if a.status != 201 || b.status != 201 || b.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("two cookie users, one key: %d %d replayed=%q", a.status, b.status, b.header.Get("Idempotent-Replayed"))
	}
	anon := startServe(t, up.srv.URL, "memory", "--allow-anonymous")
	post(t, anon.url, "/anon", "k", "x", "Authorization", "")
	if r := post(t, anon.url, "/anon", "k", "x", "Authorization", ""); r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("--allow-anonymous: %d, not replayed", r.status)
	}
	if up.count("/orders") != 2 || up.count("/anon") != 1 {
		t.Fatalf("executions %v", up.n)
	}
}
