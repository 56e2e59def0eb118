package idemhttp_test

// Regression tests for issue 13 (HTTP hardening) that use only the API
// idemhttp had before it, so each can be run against the old code too.

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/internal/testsupport/dbtest"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/sqlstore"
	"github.com/idem-go/idem/sqldialect"
)

// keyed sends a keyed POST with a principal to a live server.
func keyed(t *testing.T, base, path, key string, hdr ...string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", base+path, strings.NewReader("x"))
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Authorization", "Bearer alice")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	// The timeout is a hang guard, not a speed bound: a 16 MiB replay under
	// -race on a loaded machine can take longer than 10 s to read.
	res, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
	if err != nil {
		return -1, nil, err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, string(b)
}

// halfBody answers status with a Content-Length of 100 and 4 bytes of body,
// newProxy returns a Proxy to upstream over s.
func newProxy(t *testing.T, upstream string, s keystore.Store, opts ...idemhttp.Option) *idemhttp.Proxy {
	t.Helper()
	target, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	p, err := idemhttp.NewProxy(target, s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// serveProxy serves newProxy(t, upstream, s, opts...) until the test ends.
func serveProxy(t *testing.T, upstream string, s keystore.Store, opts ...idemhttp.Option) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(newProxy(t, upstream, s, opts...))
	t.Cleanup(srv.Close)
	return srv
}

// then resets the connection: the upstream acted and its response broke off.
func halfBody(status int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // acts on the whole request, as an API does
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		fmt.Fprintf(buf, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"ha", status, http.StatusText(status))
		_ = buf.Flush()
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // RST, not FIN
		}
		conn.Close()
	}
}

// Case 1: once a non-5xx status line has arrived, the upstream has acted:
// the key is completed as response-lost, never released.
func TestProxyUpstreamDiesMidBody(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		status   int
		direct   bool // ServeHTTP on a recorder: ReverseProxy does not panic
		wantRuns int32
		wantCode int
	}{
		{"201 under a server", 201, false, 1, 502},
		{"201 called directly", 201, true, 1, 502},
		{"400 under a server", 400, false, 1, 502},
		{"503 under a server: released", 503, false, 2, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var runs atomic.Int32
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				halfBody(tc.status)(w, r)
			}))
			defer up.Close()
			p := newProxy(t, up.URL, dbtest.MemStore(t))
			send := func() (int, http.Header, string) {
				if !tc.direct {
					srv := httptest.NewServer(p)
					defer srv.Close()
					return keyed(t, srv.URL, "/charges", "k")
				}
				r := httptest.NewRequest("POST", "/charges", strings.NewReader("x"))
				r.Header.Set("Idempotency-Key", "k")
				r.Header.Set("Authorization", "Bearer alice")
				w := httptest.NewRecorder()
				p.ServeHTTP(w, r)
				return w.Code, w.Header(), w.Body.String()
			}
			send() // the client sees a broken response (or a reset)
			code, h, body := send()
			if runs.Load() != tc.wantRuns {
				t.Fatalf("upstream ran %d times, want %d (second answer %d %s)", runs.Load(), tc.wantRuns, code, body)
			}
			if tc.wantCode > 0 && (code != tc.wantCode || !strings.Contains(body, "response-lost") || h.Get("Idempotent-Replayed") != "true") {
				t.Fatalf("retry: %d %q, want %d response-lost", code, body, tc.wantCode)
			}
		})
	}
}

// Case 1, plain middleware: a handler that panics after sending a non-5xx
// status has acted; one that panics before, or after a 5xx, has not (as far
// as idem can know) and its key is released.
func TestPanicAfterStatus(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		write    func(w http.ResponseWriter)
		wantRuns int32
	}{
		{"after 201 and half a body", func(w http.ResponseWriter) { w.WriteHeader(201); _, _ = io.WriteString(w, `{"ha`) }, 1},
		{"after 409", func(w http.ResponseWriter) { w.WriteHeader(409) }, 1},
		{"before any write", func(http.ResponseWriter) {}, 2},
		{"after 500", func(w http.ResponseWriter) { w.WriteHeader(500) }, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var runs atomic.Int32
			m := memMiddleware(t)
			srv := httptest.NewServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if runs.Add(1) == 1 {
					tc.write(w)
					panic(http.ErrAbortHandler)
				}
				w.WriteHeader(201)
			})))
			defer srv.Close()
			keyed(t, srv.URL, "/charges", "k")
			code, _, body := keyed(t, srv.URL, "/charges", "k")
			if runs.Load() != tc.wantRuns {
				t.Fatalf("handler ran %d times, want %d (retry: %d %s)", runs.Load(), tc.wantRuns, code, body)
			}
			if tc.wantRuns == 1 && (code != 502 || !strings.Contains(body, "response-lost")) {
				t.Fatalf("retry after a lost response: %d %s", code, body)
			}
		})
	}
}

// Case 2: a 502 the proxy made up is never stored, in any mode.
func TestProxyMadeUpAnswersAreNeverStored(t *testing.T) {
	t.Parallel()
	for _, store5xx := range []bool{false, true} {
		t.Run(fmt.Sprintf("store5xx=%v/not listening", store5xx), func(t *testing.T) {
			t.Parallel()
			// Nothing listens on addr, and no other process can take it
			// before the upstream comes back on it.
			addr, listen := testenv.RefusingAddr(t)
			srv := serveProxy(t, "http://"+addr, dbtest.MemStore(t), idemhttp.WithStore5xx(store5xx))
			if code, _, body := keyed(t, srv.URL, "/charges", "k"); code != 502 {
				t.Fatalf("upstream down: %d %s", code, body)
			}
			var runs atomic.Int32
			l := listen()
			up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs.Add(1); w.WriteHeader(201) })}
			go func() { _ = up.Serve(l) }()
			defer up.Close()
			if code, h, body := keyed(t, srv.URL, "/charges", "k"); code != 201 || h.Get("Idempotent-Replayed") != "" || runs.Load() != 1 {
				t.Fatalf("upstream back: %d %s, upstream ran %d times, want a fresh execution", code, body, runs.Load())
			}
		})
		t.Run(fmt.Sprintf("store5xx=%v/written, no response", store5xx), func(t *testing.T) {
			t.Parallel()
			var runs atomic.Int32
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if runs.Add(1) == 1 {
					conn, _, _ := http.NewResponseController(w).Hijack()
					conn.Close() // outcome unknown
					return
				}
				w.WriteHeader(201)
			}))
			defer up.Close()
			srv := serveProxy(t, up.URL, dbtest.MemStore(t), idemhttp.WithStore5xx(store5xx))
			if code, _, _ := keyed(t, srv.URL, "/charges", "k"); code != 502 {
				t.Fatalf("no response: %d", code)
			}
			if code, _, body := keyed(t, srv.URL, "/charges", "k"); code != 201 || runs.Load() != 2 {
				t.Fatalf("retry: %d %s, upstream ran %d times", code, body, runs.Load())
			}
		})
	}
}

// Case 4: requests whose client goes away at any moment leave no key in
// progress, on the SQL stores.
func TestCancelledClientsLeaveNoKeyInProgress(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		open  func(t *testing.T) keystore.Store
		count int
	}{
		{"sqlite", openSQLite, 3000},
		{"postgres", openPostgres, 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, err := idemhttp.New(tc.open(t), idemhttp.WithLease(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) }))
			do := func(ctx context.Context, key string) int {
				r := httptest.NewRequestWithContext(ctx, "POST", "/charges", strings.NewReader("x"))
				r.Header.Set("Idempotency-Key", key)
				r.Header.Set("Authorization", "Bearer alice")
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				return w.Code
			}
			var wg sync.WaitGroup
			sem := make(chan struct{}, 16)
			for i := range tc.count {
				wg.Add(1)
				sem <- struct{}{}
				go func() {
					defer func() { <-sem; wg.Done() }()
					ctx, cancel := context.WithCancel(context.Background())
					time.AfterFunc(time.Duration(rand.IntN(2000))*time.Microsecond, cancel)
					do(ctx, "k"+strconv.Itoa(i))
				}()
			}
			wg.Wait()
			held := 0
			for i := range tc.count {
				if do(context.Background(), "k"+strconv.Itoa(i)) == http.StatusConflict {
					held++
				}
			}
			if held != 0 {
				t.Fatalf("%d of %d keys left in progress by cancelled clients", held, tc.count)
			}
		})
	}
}

func openSQLite(t *testing.T) keystore.Store {
	return dbtest.SQLiteStore(t, "") // as idem serve opens it
}

func openPostgres(t *testing.T) keystore.Store {
	s, err := sqlstore.New(testenv.Postgres(t), sqldialect.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// Case 5: responses of unknown length, flushed or not, are stored; only
// real streams are not.
func TestChunkedResponsesAreStored(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("y", 5000) // past net/http's 4 KiB buffer: chunked
	whole := func(w http.ResponseWriter) { _, _ = io.WriteString(w, big) }
	flushed := func(w http.ResponseWriter) {
		_, _ = io.WriteString(w, big[:10])
		_ = http.NewResponseController(w).Flush()
		_, _ = io.WriteString(w, big[10:])
	}
	for _, tc := range []struct {
		name   string
		proxy  bool
		handle func(w http.ResponseWriter)
		stored bool
	}{
		{"handler writes 5 KB", false, whole, true},
		{"handler flushes", false, flushed, true},
		{"proxy, upstream writes 5 KB", true, whole, true},
		{"proxy, chunked upstream", true, flushed, true},
		{"proxy, event stream", true, func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, big)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var runs atomic.Int32
			app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs.Add(1); tc.handle(w) })
			var h http.Handler
			if tc.proxy {
				up := httptest.NewServer(app)
				defer up.Close()
				p := newProxy(t, up.URL, dbtest.MemStore(t))
				h = p
			} else {
				m := memMiddleware(t)
				h = m.Handler(app)
			}
			srv := httptest.NewServer(h)
			defer srv.Close()
			if code, _, body := keyed(t, srv.URL, "/report", "k"); code != 200 || body != big {
				t.Fatalf("first: %d, %d bytes", code, len(body))
			}
			code, h2, body := keyed(t, srv.URL, "/report", "k")
			if tc.stored && (code != 200 || body != big || h2.Get("Idempotent-Replayed") != "true") {
				t.Fatalf("replay: %d %q, %d bytes, want the stored 200", code, h2.Get("Idempotent-Replayed"), len(body))
			}
			if !tc.stored && code != 410 {
				t.Fatalf("replay of a stream: %d, want 410", code)
			}
			if runs.Load() != 1 {
				t.Fatalf("handler ran %d times", runs.Load())
			}
		})
	}
}

// Case 6: the 409's Retry-After reflects how long executions take, not the
// lease left.
func TestRetryAfterFollowsExecutionTime(t *testing.T) {
	t.Parallel()
	m := memMiddleware(t, idemhttp.WithLease(30*time.Second))
	hold := make(chan struct{})
	entered := make(chan struct{}, 1)
	srv := httptest.NewServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			entered <- struct{}{}
			<-hold
		}
		w.WriteHeader(201)
	})))
	defer srv.Close()
	for i := range 5 { // executions that take next to no time
		keyed(t, srv.URL, "/quick", "q"+strconv.Itoa(i))
	}
	done := make(chan struct{})
	go func() { keyed(t, srv.URL, "/hold", "h"); close(done) }()
	<-entered
	code, h, _ := keyed(t, srv.URL, "/hold", "h")
	close(hold)
	<-done
	ra, err := strconv.Atoi(h.Get("Retry-After"))
	if code != 409 || err != nil || ra < 1 || ra > 2 {
		t.Fatalf("409 Retry-After %q (status %d), want 1 or 2 s: executions take milliseconds, not the 30 s lease", h.Get("Retry-After"), code)
	}
}

// Case 7: a keyed request with no principal is refused by default, before
// any store I/O or execution.
func TestNoPrincipalIsRefused(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	m := memMiddleware(t)
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs.Add(1); w.WriteHeader(201) }))
	do := func(key, cookie string) *http.Response {
		r := httptest.NewRequest("POST", "/orders", strings.NewReader("pen"))
		if key != "" {
			r.Header.Set("Idempotency-Key", key)
		}
		r.Header.Set("Cookie", "session="+cookie) // not a principal unless configured
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Result()
	}
	for _, user := range []string{"alice", "bob"} {
		if r := do("k", user); r.StatusCode != 400 || problemType(t, r) != "no-principal" {
			t.Fatalf("%s's anonymous keyed request: %d", user, r.StatusCode)
		}
	}
	if runs.Load() != 0 {
		t.Fatalf("anonymous keyed requests executed %d times", runs.Load())
	}
	// Unkeyed requests are not affected.
	if r := do("", "alice"); r.StatusCode != 201 {
		t.Fatalf("unkeyed anonymous POST: %d", r.StatusCode)
	}
}

// Case 8: every answer to a keyed request echoes its Idempotency-Key.
func TestIdempotencyKeyIsEchoed(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, tc := range []struct {
		name, key, body string
		want            int
	}{
		{"executed", `"k-1"`, "pen", 201},
		{"replayed", `"k-1"`, "pen", 201},
		{"reused", `"k-1"`, "pencil", 422},
		{"bare", "k-2", "pen", 201},
	} {
		r := f.do("POST", "/orders", tc.key, tc.body, "X-Request-Id", "abc")
		if r.StatusCode != tc.want || r.Header.Get("Idempotency-Key") != tc.key || len(r.Header.Values("Idempotency-Key")) != 1 {
			t.Errorf("%s: %d, Idempotency-Key %q, want %d and %q", tc.name, r.StatusCode, r.Header.Values("Idempotency-Key"), tc.want, tc.key)
		}
	}
}

// Beyond the list: statuses that mean "not acted on, retry" (429 from a rate
// limiter, 408, 425) are not stored, or every retry would get them for the
// TTL and the effect would never happen.
func TestNotExecutedStatusesAreNotStored(t *testing.T) {
	t.Parallel()
	for _, status := range []int{408, 425, 429} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			first := true
			f.up.hook = func(w http.ResponseWriter, r *http.Request) bool {
				if first {
					first = false
					w.Header().Set("Retry-After", "1")
					w.WriteHeader(status)
					return true
				}
				return false
			}
			if r := f.do("POST", "/orders", "k", "pen", "Authorization", "Bearer a"); r.StatusCode != status {
				t.Fatalf("first: %d", r.StatusCode)
			}
			if r := f.do("POST", "/orders", "k", "pen", "Authorization", "Bearer a"); r.StatusCode != 201 || f.up.total.Load() != 2 {
				t.Fatalf("retry after %d: %d, executions %d, want a fresh execution", status, r.StatusCode, f.up.total.Load())
			}
		})
	}
}

// Beyond the list: an upstream whose body never ends is cut at the lease
// (with a store that renews leases, only a lost lease or Abort cuts it);
// it had answered 201, so the key is completed as response-lost and the
// retry does not execute again.
func TestProxyUpstreamBodyNeverEnds(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(201)
		for {
			if _, err := io.WriteString(w, "."); err != nil {
				return
			}
			_ = http.NewResponseController(w).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}))
	defer up.Close()
	// A store that cannot renew: the lease, not its loss, ends the call.
	srv := serveProxy(t, up.URL, noExtend{dbtest.MemStore(t)}, idemhttp.WithLease(500*time.Millisecond))
	keyed(t, srv.URL, "/export", "k")
	code, _, body := keyed(t, srv.URL, "/export", "k")
	if code != 502 || !strings.Contains(body, "response-lost") || runs.Load() != 1 {
		t.Fatalf("retry: %d %s, upstream ran %d times", code, body, runs.Load())
	}
}
