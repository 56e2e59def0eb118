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
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/testsupport/httptestx"
	"github.com/idem-go/idem/internal/testsupport/testenv"
)

func TestServeDraftCases(t *testing.T) {
	up := newUpstream(t)
	p := startServe(t, up.srv.URL, "sqlite:"+filepath.Join(t.TempDir(), "idem.db"), "--require-key")

	if r := post(t, p.url, "/orders", "", "x"); r.status != 400 || !strings.Contains(r.body, "missing-key") {
		t.Errorf("missing key: %d %s", r.status, r.body)
	}
	if r := post(t, p.url, "/orders", `"`+strings.Repeat("k", 256)+`"`, "x"); r.status != 400 || !strings.Contains(r.body, "invalid-key") {
		t.Errorf("long key: %d %s", r.status, r.body)
	}
	first := post(t, p.url, "/orders", "order-1", "pen")
	if first.status != 201 {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	again := post(t, p.url, "/orders", "order-1", "pen")
	if again.status != first.status || again.body != first.body || again.header.Get("Location") != first.header.Get("Location") ||
		again.header.Get("Content-Type") != "application/json" || again.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay differs: %+v vs %+v", again, first)
	}
	if again.header.Get("Set-Cookie") != "" || again.header.Get("X-Request-Id") != "" {
		t.Errorf("replay carried Set-Cookie or X-Request-Id: %v", again.header)
	}
	if first.header.Get("Idempotency-Key") != "order-1" || again.header.Get("Idempotency-Key") != "order-1" || again.header.Get("Original-Request") != first.header.Get("X-Request-Id") {
		t.Errorf("correlation headers: first %v, replay %v", first.header, again.header)
	}
	if r := post(t, p.url, "/orders", "order-1", "pencil"); r.status != 422 {
		t.Errorf("reused key: %d", r.status)
	}
	if r := post(t, p.url, "/refunds", "order-1", "pen"); r.status != 422 {
		t.Errorf("reused key on another path: %d", r.status)
	}
	if up.count("/orders") != 1 || up.count("/refunds") != 0 {
		t.Fatalf("executions %v", up.n)
	}
	// One key, two principals: two executions, no cross-principal replay.
	a := post(t, p.url, "/slow", "shared", "x", "Authorization", "Bearer alice")
	b := post(t, p.url, "/slow", "shared", "x", "Authorization", "Bearer bob")
	if a.body == b.body || up.count("/slow") != 2 {
		t.Errorf("principals: %q %q, executions %d", a.body, b.body, up.count("/slow"))
	}
	// Upstream 500: released, the retry executes.
	if r := post(t, p.url, "/fail-once", "f", "x"); r.status != 500 {
		t.Errorf("fail-once: %d", r.status)
	}
	if r := post(t, p.url, "/fail-once", "f", "x"); r.status != 201 || up.count("/fail-once") != 2 {
		t.Errorf("retry after 500: %d, executions %d", r.status, up.count("/fail-once"))
	}
	// Upstream dies mid-request: 502, released, the retry executes.
	if r := post(t, p.url, "/crash-once", "c", "x"); r.status != 502 {
		t.Errorf("crash-once: %d %s", r.status, r.body)
	}
	if r := post(t, p.url, "/crash-once", "c", "x"); r.status != 201 {
		t.Errorf("retry after upstream crash: %d", r.status)
	}
	// 10 MiB: 413, no upstream call.
	before := up.total.Load()
	if r := post(t, p.url, "/orders", "big", strings.Repeat("x", 10<<20)); r.status != 413 || up.total.Load() != before {
		t.Errorf("10 MiB body: %d", r.status)
	}
	// Metrics and readiness.
	res, err := http.Get(p.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(m), `idem_http_requests_total{outcome="replayed",route="default"} 1`) {
		t.Errorf("metrics lack the replay:\n%s", m)
	}
	// The key store is wrapped too: the replay was a Reserve that found the
	// key done, and the reused key a mismatch.
	for _, re := range []string{
		`idem_keystore_reservations_total\{outcome="acquired",store="sqlite"\} [1-9]`,
		`idem_keystore_reservations_total\{outcome="done",store="sqlite"\} [1-9]`,
		`idem_keystore_reservations_total\{outcome="mismatch",store="sqlite"\} [1-9]`,
		`idem_keystore_operation_duration_seconds_count\{op="complete",store="sqlite"\} [1-9]`,
	} {
		if !regexp.MustCompile(re).Match(m) {
			t.Errorf("metrics lack %s:\n%s", re, m)
		}
	}
	if res, err := http.Get(p.admin + "/readyz"); err != nil || res.StatusCode != 200 {
		t.Errorf("readyz: %v %v", res, err)
	}
}

func TestServeConcurrentDuplicates(t *testing.T) {
	up := newUpstream(t)
	for _, wait := range []bool{false, true} {
		flags := []string{}
		path := "/slow"
		if wait {
			flags = append(flags, "--wait", "5s")
		}
		p := startServe(t, up.srv.URL, "memory", flags...)
		key := fmt.Sprintf("race-%v", wait)
		var wg sync.WaitGroup
		replies := make(chan reply, 50)
		for i := 0; i < 50; i++ {
			wg.Add(1)
			go func() { defer wg.Done(); replies <- post(t, p.url, path, key, "x") }()
		}
		wg.Wait()
		close(replies)
		codes := map[int]int{}
		for r := range replies {
			codes[r.status]++
			if r.status == 409 && r.header.Get("Retry-After") == "" {
				t.Error("409 without Retry-After")
			}
		}
		if wait && codes[201] != 50 || !wait && codes[201]+codes[409] != 50 {
			t.Errorf("wait=%v: status counts %v", wait, codes)
		}
	}
	if n := up.count("/slow"); n != 2 {
		t.Fatalf("100 requests under two keys executed %d times, want 2", n)
	}
}

func TestServeSharedStores(t *testing.T) {
	stores := map[string]func(t *testing.T) string{
		"sqlite":   func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "shared.db") },
		"postgres": func(t *testing.T) string { return testenv.PostgresURL(t) },
		"redis":    func(t *testing.T) string { return "redis://" + testenv.RedisAddr(t) + "/0" },
	}
	for name, store := range stores {
		t.Run(name, func(t *testing.T) {
			up := newUpstream(t)
			s := store(t)
			p1 := startServe(t, up.srv.URL, s)
			p2 := startServe(t, up.srv.URL, s)
			key := testenv.Name("shared-")
			var wg sync.WaitGroup
			replies := make(chan reply, 20)
			for i := 0; i < 20; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					base := p1.url
					if i%2 == 1 {
						base = p2.url
					}
					replies <- post(t, base, "/slow", key, "x")
				}()
			}
			wg.Wait()
			close(replies)
			for r := range replies {
				if r.status != 201 && r.status != 409 {
					t.Errorf("status %d: %s", r.status, r.body)
				}
			}
			// After completion both proxies replay the one response.
			r1, r2 := post(t, p1.url, "/slow", key, "x"), post(t, p2.url, "/slow", key, "x")
			if r1.body != r2.body || r1.header.Get("Idempotent-Replayed") != "true" || r2.header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("replays differ: %q %q", r1.body, r2.body)
			}
			if n := up.count("/slow"); n != 1 {
				t.Fatalf("two proxies on one %s store executed %d times, want 1", name, n)
			}
		})
	}
}

func TestServeExpiryAndLease(t *testing.T) {
	up := newUpstream(t)
	db := "sqlite:" + filepath.Join(t.TempDir(), "idem.db")
	p := startServe(t, up.srv.URL, db, "--ttl", "300ms", "--lease", "1s")
	post(t, p.url, "/orders", "k", "x")
	time.Sleep(600 * time.Millisecond)
	if r := post(t, p.url, "/orders", "k", "x"); r.header.Get("Idempotent-Replayed") != "" || up.count("/orders") != 2 {
		t.Fatalf("after the TTL: replayed=%q executions %d", r.header.Get("Idempotent-Replayed"), up.count("/orders"))
	}
	// The proxy is SIGKILLed while the upstream runs: the key stays in
	// progress until the lease ends, and no longer.
	go func() {
		req, _ := http.NewRequest("POST", p.url+"/very-slow", strings.NewReader("x"))
		req.Header.Set("Idempotency-Key", "stuck")
		req.Header.Set("Authorization", "Bearer e2e-client")
		if res, err := client.Do(req); err == nil {
			res.Body.Close()
		}
	}()
	waitFor(t, func() bool { return up.count("/very-slow") > 0 })
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
	killed := time.Now()
	p2 := startServe(t, up.srv.URL, db, "--ttl", "300ms", "--lease", "1s")
	if time.Since(killed) < 700*time.Millisecond {
		if r := post(t, p2.url, "/very-slow", "stuck", "x"); r.status != 409 {
			t.Fatalf("inside the dead proxy's lease: %d, want 409", r.status)
		}
	}
	time.Sleep(time.Until(killed.Add(1100 * time.Millisecond)))
	done := make(chan reply)
	go func() { done <- post(t, p2.url, "/very-slow", "stuck", "x") }()
	select {
	case r := <-done:
		if r.status != 201 {
			t.Fatalf("after the lease: %d %s", r.status, r.body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no answer after the lease")
	}
}

func TestServeStoreDown(t *testing.T) {
	up := newUpstream(t)
	p := startServe(t, up.srv.URL, "redis://"+deadAddr(t)+"/0", "--store-check=warn") // nothing listens there
	r := post(t, p.url, "/orders", "k", "x")
	if r.status != 503 || up.total.Load() != 0 {
		t.Fatalf("store down: %d, upstream calls %d", r.status, up.total.Load())
	}
	if res, err := http.Get(p.admin + "/readyz"); err != nil || res.StatusCode != 503 {
		t.Fatalf("readyz with the store down: %v %v", res, err)
	}
}

func TestServeSIGTERMDrains(t *testing.T) {
	up := newUpstream(t)
	db := "sqlite:" + filepath.Join(t.TempDir(), "idem.db")
	// Drain long enough: the in-flight request completes and is stored.
	p := startServe(t, up.srv.URL, db, "--drain", "5s")
	res := make(chan reply)
	go func() { res <- post(t, p.url, "/slow", "d1", "x") }()
	waitFor(t, func() bool { return up.count("/slow") > 0 })
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if r := recv(t, res); r.status != 201 {
		t.Fatalf("in-flight request during drain: %d", r.status)
	}
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("exit after drain: %v\n%s", err, p.out)
	}
	// Drain too short: the upstream call is aborted and the key released, so
	// the retry on another proxy executes at once.
	p = startServe(t, up.srv.URL, db, "--drain", "100ms", "--lease", "30s")
	go func() { res <- post(t, p.url, "/very-slow", "d2", "x") }()
	waitFor(t, func() bool { return up.count("/very-slow") > 0 })
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if r := recv(t, res); r.status != 502 && r.status != 504 {
		t.Fatalf("aborted request: %d %s", r.status, r.body)
	}
	_ = p.cmd.Wait()
	p2 := startServe(t, up.srv.URL, db)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", p2.url+"/orders", strings.NewReader("x"))
	req.Header.Set("Idempotency-Key", "d2-check")
	req.Header.Set("Authorization", "Bearer e2e-client")
	if r, err := client.Do(req); err != nil || r.StatusCode != 201 {
		t.Fatalf("fresh proxy: %v %v", r, err)
	}
	if r := post(t, p2.url, "/very-slow", "d2", "x"); r.status != 201 {
		t.Fatalf("retry of the aborted request: %d (its key should have been released)", r.status)
	}
}

// Regression tests for issue 13 at the process level.

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
	out, err := runServeExit(t, "--upstream", "http://127.0.0.1:1", "--store", "redis://"+deadAddr(t)+"/0")
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
		drip       string // sent every 100 ms, for ever
	}{
		{"keyed, no body", "Idempotency-Key: k1\r\nContent-Length: 100\r\n", ""},
		{"keyed, a byte at a time", "Idempotency-Key: k2\r\nContent-Length: 100000\r\n", "x"},
		{"unkeyed, no body", "Content-Length: 100\r\n", ""},
		{"unkeyed, a byte at a time", "Content-Length: 100000\r\n", "x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// Cut off: an answer, then the connection closed. A server that
			// keeps the connection fails at the client's read deadline.
			conn := httptestx.SlowClient(t, addr, "Authorization: Bearer a\r\n"+tc.head, tc.drip, 100*time.Millisecond)
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
	addr, listen := testenv.RefusingAddr(t)
	p := startServe(t, "http://"+addr, "memory", "--store-5xx")
	if r := post(t, p.url, "/orders", "k", "x"); r.status != 502 {
		t.Fatalf("upstream down: %d %s", r.status, r.body)
	}
	l := listen()
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
