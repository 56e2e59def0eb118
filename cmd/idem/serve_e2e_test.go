package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/testenv"
)

// The end-to-end tests run `idem serve` as separate processes (this test
// binary re-executed as the idem command) in front of a counting upstream.

const execEnv = "IDEM_TEST_EXEC_MAIN"

func TestMain(m *testing.M) {
	testenv.Child(execEnv, func() int {
		os.Args = append([]string{"idem"}, os.Args[1:]...)
		main()
		return 0
	})
	os.Exit(testenv.Main(m))
}

// counter is a test upstream that counts executions per path.
type counter struct {
	mu    sync.Mutex
	n     map[string]int
	total atomic.Int32
	srv   *httptest.Server
}

func newUpstream(t *testing.T) *counter {
	c := &counter{n: map[string]int{}}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		c.total.Add(1)
		c.mu.Lock()
		c.n[r.URL.Path]++
		n := c.n[r.URL.Path]
		c.mu.Unlock()
		switch r.URL.Path {
		case "/slow":
			time.Sleep(400 * time.Millisecond)
		case "/very-slow": // slow the first time only
			if n > 1 {
				break
			}
			select {
			case <-time.After(3 * time.Second):
			case <-r.Context().Done():
				return
			}
		case "/fail-once":
			if n == 1 {
				http.Error(w, "database down", http.StatusInternalServerError)
				return
			}
		case "/crash-once":
			if n == 1 { // the upstream dies mid-request
				conn, _, _ := http.NewResponseController(w).Hijack()
				conn.Close()
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", fmt.Sprintf("/orders/%d", n))
		w.Header().Set("Set-Cookie", "s=1")
		w.Header().Set("X-Request-Id", fmt.Sprint(time.Now().UnixNano()))
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"n":%d,"len":%d}`, n, len(body))
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *counter) count(path string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[path]
}

type proxyProc struct {
	url   string
	admin string
	cmd   *exec.Cmd
	out   *bytes.Buffer
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startServe runs `idem serve` and waits until it answers.
func startServe(t *testing.T, upstream, store string, flags ...string) *proxyProc {
	t.Helper()
	p := &proxyProc{out: &bytes.Buffer{}}
	listen, admin := freeAddr(t), freeAddr(t)
	p.url, p.admin = "http://"+listen, "http://"+admin
	args := append([]string{"serve", "--listen", listen, "--admin-listen", admin, "--upstream", upstream, "--store", store}, flags...)
	p.cmd = exec.Command(os.Args[0], args...)
	p.cmd.Env = append(os.Environ(), execEnv+"=1")
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
		if t.Failed() {
			t.Logf("idem serve output:\n%s", p.out)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if r, err := http.Get(p.admin + "/healthz"); err == nil {
			r.Body.Close()
			return p
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("idem serve did not start:\n%s", p.out)
	return nil
}

// waitFor polls cond for up to 15 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 15s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func recv(t *testing.T, c chan reply) reply {
	t.Helper()
	select {
	case r := <-c:
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("no reply in 20s")
		return reply{}
	}
}

// client bounds every request, so a hung proxy fails the test instead of
// the test binary.
var client = &http.Client{Timeout: 20 * time.Second}

type reply struct {
	status int
	header http.Header
	body   string
}

func post(t *testing.T, base, path, key, body string, hdr ...string) reply {
	t.Helper()
	req, _ := http.NewRequest("POST", base+path, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	// Keyed requests need a principal (no anonymous scope by default); a
	// header given with an empty value is removed.
	req.Header.Set("Authorization", "Bearer e2e-client")
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := client.Do(req)
	if err != nil { // Errorf, not Fatalf: post runs in goroutines too
		t.Errorf("POST %s: %v", path, err)
		return reply{status: -1, body: err.Error()}
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return reply{res.StatusCode, res.Header, string(b)}
}

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
	if !strings.Contains(string(m), `idem_http_requests_total{outcome="replayed"} 1`) {
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
	p := startServe(t, up.srv.URL, "redis://"+freeAddr(t)+"/0", "--store-check=warn") // nothing listens there
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
