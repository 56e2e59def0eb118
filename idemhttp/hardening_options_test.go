package idemhttp_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/internal/testsupport/dbtest"
	"github.com/idem-go/idem/internal/testsupport/httptestx"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/memstore"
	"github.com/idem-go/idem/keystore/storetest"
)

// Case 7: how an operator scopes requests that have no Authorization.
func TestScopeCookieAndAnonymous(t *testing.T) {
	t.Parallel()
	type req struct {
		auth, cookie string
		want         int    // status
		replayed     string // Idempotent-Replayed
	}
	for _, tc := range []struct {
		name string
		opts []idemhttp.Option
		reqs []req
		runs int32
	}{
		{"cookie scopes users apart", []idemhttp.Option{idemhttp.WithScopeCookie("session")}, []req{
			{"", "alice", 201, ""}, {"", "bob", 201, ""}, {"", "alice", 201, "true"}, {"", "bob", 201, "true"},
		}, 2},
		{"cookie, else Authorization, else refused", []idemhttp.Option{idemhttp.WithScopeCookie("session")}, []req{
			{"Bearer k1", "", 201, ""}, {"Bearer k1", "", 201, "true"}, {"", "", 400, ""},
		}, 1},
		{"anonymous allowed: one shared scope", []idemhttp.Option{idemhttp.WithAllowAnonymous(true)}, []req{
			{"", "alice", 201, ""}, {"", "bob", 201, "true"}, {"Bearer k1", "", 201, ""},
		}, 2},
		{"cookie with anonymous fallback", []idemhttp.Option{idemhttp.WithScopeCookie("session"), idemhttp.WithAllowAnonymous(true)}, []req{
			{"", "", 201, ""}, {"", "", 201, "true"}, {"", "alice", 201, ""},
		}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var runs atomic.Int32
			m := memMiddleware(t, tc.opts...)
			h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs.Add(1); w.WriteHeader(201) }))
			for i, q := range tc.reqs {
				r := httptest.NewRequest("POST", "/orders", strings.NewReader("pen"))
				r.Header.Set("Idempotency-Key", "k")
				if q.auth != "" {
					r.Header.Set("Authorization", q.auth)
				}
				if q.cookie != "" {
					r.AddCookie(&http.Cookie{Name: "session", Value: q.cookie})
				}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != q.want || w.Header().Get("Idempotent-Replayed") != q.replayed {
					t.Errorf("request %d %+v: %d replayed=%q", i, q, w.Code, w.Header().Get("Idempotent-Replayed"))
				}
				if q.want == 400 && !strings.Contains(w.Body.String(), "no-principal") {
					t.Errorf("request %d: %s", i, w.Body)
				}
			}
			if runs.Load() != tc.runs {
				t.Fatalf("executions %d, want %d", runs.Load(), tc.runs)
			}
		})
	}
}

// Case 3: clients that send headers and no body, or a body a byte at a
// time, are answered 408 once the body deadline passes, before the store.
func TestBodyTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		head  string
		drip  string // sent a byte every 50 ms, for ever
		chunk bool
	}{
		{"headers, no body", "Content-Length: 100\r\n", "", false},
		{"a byte at a time", "Content-Length: 100000\r\n", "x", false},
		{"chunked, no body", "Transfer-Encoding: chunked\r\n", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			store := &countingStore{Store: dbtest.MemStore(t)}
			m, err := idemhttp.New(store, idemhttp.WithBodyTimeout(300*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) })))
			defer srv.Close()
			conn := httptestx.SlowClient(t, srv.Listener.Addr().String(), "Idempotency-Key: k\r\nAuthorization: Bearer a\r\n"+tc.head, tc.drip, 50*time.Millisecond)
			res, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			b, _ := io.ReadAll(res.Body)
			if res.StatusCode != 408 || !strings.Contains(string(b), "request-timeout") || store.calls.Load() != 0 {
				t.Fatalf("%d %s, store calls %d", res.StatusCode, b, store.calls.Load())
			}
		})
	}
}

// A server's ReadTimeout bounds a keyed body when it is the tighter bound:
// the middleware does not replace it with its own, longer body timeout. When
// the middleware's is tighter, it applies, and the 408 says which bound
// passed.
func TestBodyTimeoutAndServerReadTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		readTimeout time.Duration // the server's
		bodyTimeout time.Duration // the middleware's
		want        string        // in the 408's detail
	}{
		// The server's deadline counts from the request's first byte, and
		// a read that starts after it fails without an answer: 2 s, not
		// less, leaves a loaded machine time to read the headers.
		{"server's is tighter", 2 * time.Second, time.Minute, "server's read timeout (2s"},
		{"middleware's is tighter", time.Minute, 300 * time.Millisecond, "within 300ms;"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			store := &countingStore{Store: dbtest.MemStore(t)}
			m, err := idemhttp.New(store, idemhttp.WithBodyTimeout(tc.bodyTimeout))
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewUnstartedServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) })))
			srv.Config.ReadTimeout = tc.readTimeout
			srv.Start()
			defer srv.Close()
			// The client's read deadline (10 s) is well before the longer
			// bound: an answer only comes by the tighter one.
			conn := httptestx.SlowClient(t, srv.Listener.Addr().String(), "Idempotency-Key: k\r\nAuthorization: Bearer a\r\nContent-Length: 100\r\n", "", 0)
			res, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("no answer by the tighter bound: %v", err)
			}
			b, _ := io.ReadAll(res.Body)
			if res.StatusCode != 408 || !strings.Contains(string(b), tc.want) || store.calls.Load() != 0 {
				t.Fatalf("%d %s, store calls %d; want 408 naming %q", res.StatusCode, b, store.calls.Load(), tc.want)
			}
		})
	}
}

// Case 3: concurrent uploads past the buffered-bytes bound are refused at
// once with 503 and Retry-After, and the bound holds.
func TestBufferedBytesBound(t *testing.T) {
	t.Parallel()
	const (
		uploads = 16
		size    = 1 << 20
		bound   = 4 << 20
	)
	m := memMiddleware(t, idemhttp.WithMaxRequestBody(size), idemhttp.WithMaxBufferedBytes(bound))
	var arrived atomic.Int32
	hold := make(chan struct{})
	srv := httptest.NewServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		<-hold // keep the body held
		w.WriteHeader(201)
	})))
	defer srv.Close()
	var busy atomic.Int32
	var wg sync.WaitGroup
	for i := range uploads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("POST", srv.URL+"/upload", io.NopCloser(strings.NewReader(strings.Repeat("u", size))))
			req.ContentLength = -1 // chunked: the middleware cannot know the size up front
			req.Header.Set("Idempotency-Key", fmt.Sprint("u", i))
			req.Header.Set("Authorization", "Bearer a")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				busy.Add(1)
				return
			}
			defer res.Body.Close()
			if res.StatusCode == 503 && res.Header.Get("Retry-After") != "" {
				busy.Add(1)
			} else if res.StatusCode != 201 {
				t.Errorf("upload %d: %d", i, res.StatusCode)
			}
		}()
	}
	deadline := time.Now().Add(20 * time.Second)
	for arrived.Load()+busy.Load() < uploads && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	now, peak := idemhttp.BufferedBytes(m)
	close(hold)
	wg.Wait()
	if busy.Load() == 0 || arrived.Load() == 0 {
		t.Fatalf("%d uploads held, %d refused: want both", arrived.Load(), busy.Load())
	}
	if peak > bound || now > bound {
		t.Fatalf("buffered %d bytes at peak, bound %d", peak, bound)
	}
	if now, _ := idemhttp.BufferedBytes(m); now != 0 {
		t.Fatalf("%d bytes still accounted after every request ended", now)
	}
}

// Beyond the list: a client that stops reading a large response cannot hold
// the key until its lease ends (after which a retry would execute again):
// the write to it times out, the response is stored, and the retry replays.
func TestStalledReaderDoesNotHoldTheKey(t *testing.T) {
	t.Parallel()
	const size = 16 << 20 // more than loopback socket buffers absorb
	var runs atomic.Int32
	ms, err := memstore.New(memstore.WithMaxResultSize(size + 64<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	m, err := idemhttp.New(ms, idemhttp.WithMaxResponseBody(size), idemhttp.WithClientWriteTimeout(200*time.Millisecond), idemhttp.WithLease(3*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(201)
		chunk := []byte(strings.Repeat("z", 64<<10))
		for range size / len(chunk) {
			_, _ = w.Write(chunk)
		}
	})))
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetReadBuffer(4096)
	fmt.Fprint(conn, "POST /export HTTP/1.1\r\nHost: x\r\nIdempotency-Key: big\r\nAuthorization: Bearer alice\r\nContent-Length: 1\r\n\r\nx")
	// The stalled client never reads. Its retry, on another connection,
	// gets 409 while the first is running, then the stored response. The
	// retry starts once the first request runs, so it cannot come first.
	// The deadline is a hang guard below the lease, not a speed bound: a
	// key held until its lease ended would show as 409s past it (or as a
	// second execution), however slow the machine.
	deadline := time.Now().Add(2 * time.Minute)
	for runs.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	for {
		code, h, body := keyed(t, srv.URL, "/export", "big")
		if code == 201 && h.Get("Idempotent-Replayed") == "true" && len(body) == size {
			break
		}
		if code != 409 || time.Now().After(deadline) {
			t.Fatalf("retry: %d, %d bytes; want 409 and then the stored response", code, len(body))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if runs.Load() != 1 {
		t.Fatalf("executions %d", runs.Load())
	}
}

const testLease = 300 * time.Millisecond

// noExtend hides a store's Extend: a store that cannot renew leases.
type noExtend struct{ keystore.Store }

// slowRuns serves h (3.5 leases long) at srv, sends the first keyed request
// and, while it runs, 4 retriers with the same key every 100 ms until they
// get a non-409; it returns the first response's status and the retriers'.
func slowRuns(t *testing.T, srv *httptest.Server, started <-chan struct{}) (first int, retries []int) {
	t.Helper()
	var wg sync.WaitGroup
	wg.Go(func() { first, _, _ = keyed(t, srv.URL, "/slow", "k") })
	<-started
	var mu sync.Mutex
	for range 4 {
		wg.Go(func() {
			for range 200 {
				code, h, _ := keyed(t, srv.URL, "/slow", "k")
				if code == http.StatusConflict {
					time.Sleep(100 * time.Millisecond)
					continue
				}
				if h.Get("Idempotent-Replayed") != "true" {
					code = -code
				}
				mu.Lock()
				retries = append(retries, code)
				mu.Unlock()
				return
			}
		})
	}
	wg.Wait()
	return first, retries
}

// slowHandler takes 3.5 leases unless its context ends first.
func slowHandler(runs *atomic.Int32, started chan struct{}) http.Handler {
	var once sync.Once
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		once.Do(func() { close(started) })
		select {
		case <-time.After(testLease * 7 / 2):
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte("slow"))
		case <-r.Context().Done():
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
}

func checkOnce(t *testing.T, runs int32, first int, retries []int) {
	t.Helper()
	if runs != 1 || first != http.StatusCreated {
		t.Fatalf("a handler 3.5x its lease ran %d times (first answer %d), want once and 201", runs, first)
	}
	if len(retries) != 4 {
		t.Fatalf("retries: %v, want 4 replays", retries)
	}
	for _, c := range retries {
		if c != http.StatusCreated {
			t.Fatalf("retries answered %v, want 201 replayed (negative: not replayed)", retries)
		}
	}
}

// serveKeyed serves h behind the middleware (proxy false) or behind a
// Proxy to an upstream running h, with store s, a lease of testLease and
// opts.
func serveKeyed(t *testing.T, s keystore.Store, h http.Handler, proxy bool, opts ...idemhttp.Option) *httptest.Server {
	t.Helper()
	opts = append([]idemhttp.Option{idemhttp.WithLease(testLease)}, opts...)
	var handler http.Handler
	if proxy {
		up := httptest.NewServer(h)
		t.Cleanup(up.Close)
		handler = newProxy(t, up.URL, s, opts...)
	} else {
		m, err := idemhttp.New(s, opts...)
		if err != nil {
			t.Fatal(err)
		}
		handler = m.Handler(h)
	}
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	return srv
}

// modeNames name the two ways serveKeyed serves a handler.
var modeNames = map[bool]string{false: "middleware", true: "proxy"}

// forEachMode runs f as a parallel subtest for each mode: behind the
// middleware (proxy false), then as the upstream of a Proxy.
func forEachMode(t *testing.T, f func(t *testing.T, proxy bool)) {
	t.Helper()
	for _, proxy := range []bool{false, true} {
		t.Run(modeNames[proxy], func(t *testing.T) {
			t.Parallel()
			f(t, proxy)
		})
	}
}

// A handler (middleware) or upstream (proxy) 3.5x its lease, with 4
// retriers: the lease is renewed, it runs once, and the retriers get its
// response replayed.
func TestRenewsLease(t *testing.T) {
	t.Parallel()
	forEachMode(t, func(t *testing.T, proxy bool) {
		var runs atomic.Int32
		started := make(chan struct{})
		srv := serveKeyed(t, storetest.NewRefStore(), slowHandler(&runs, started), proxy)
		first, retries := slowRuns(t, srv, started)
		checkOnce(t, runs.Load(), first, retries)
	})
}

// Without renewals (the behaviour before keep-alive, and with a store that
// cannot renew) the proxy cuts the upstream call at the lease: 504, key
// released, and a retry executes again.
func TestProxyWithoutExtenderCutsAtLease(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	srv := serveKeyed(t, noExtend{storetest.NewRefStore()}, slowHandler(&runs, make(chan struct{})), true)
	if code, _, _ := keyed(t, srv.URL, "/slow", "k"); code != http.StatusGatewayTimeout {
		t.Fatalf("without renewals: %d, want 504 at the lease", code)
	}
}

// A lost lease cancels the handler's context (middleware) and the upstream
// call (proxy), with a cause wrapping ErrLeaseLost.
func TestLostLeaseCancels(t *testing.T) {
	t.Parallel()
	forEachMode(t, func(t *testing.T, proxy bool) {
		s := storetest.NewRefStore()
		var cause atomic.Value
		ended := make(chan struct{})
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// Read the body: net/http then watches the connection, and
			// an upstream's context ends when the proxy drops it.
			_, _ = io.ReadAll(r.Body)
			s.FailExtend(keystore.ErrLeaseLost) // the key was taken away
			select {
			case <-r.Context().Done():
				if c := context.Cause(r.Context()); c != nil {
					cause.Store(c)
				}
				close(ended)
			case <-time.After(20 * testLease):
			}
		})
		srv := serveKeyed(t, s, h, proxy)
		code, _, _ := keyed(t, srv.URL, "/x", "k")
		// The proxy answers as it drops the upstream call; the upstream
		// sees its connection go a moment later (well before its own
		// 20-lease fallback).
		select {
		case <-ended:
		case <-time.After(10 * testLease):
			t.Fatalf("the %s's handler was not cancelled when the lease was lost (answer %d)", modeNames[proxy], code)
		}
		if c, _ := cause.Load().(error); !proxy && !errors.Is(c, keystore.ErrLeaseLost) {
			t.Fatalf("cause %v, want ErrLeaseLost", c)
		}
	})
}

// StoreKey names the key the middleware writes for a request.
func TestStoreKey(t *testing.T) {
	t.Parallel()
	s := storetest.NewRefStore()
	m, err := idemhttp.New(s)
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest("POST", "/orders", strings.NewReader("x"))
	req.Header.Set("Idempotency-Key", `"order-1"`)
	req.Header.Set("Authorization", "Bearer alice")
	key, err := m.StoreKey(req)
	if err != nil || !idemhttp.IsStoreKey(key) {
		t.Fatalf("StoreKey: %q %v", key, err)
	}
	m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) })).ServeHTTP(httptest.NewRecorder(), req)
	k, err := s.Inspect(context.Background(), key)
	if err != nil || k.State != keystore.Done {
		t.Fatalf("the key StoreKey names: %+v %v, want the stored response", k, err)
	}
	if st, _, _, err := idemhttp.DescribeRecord(k.Result); err != nil || st != 201 {
		t.Fatalf("DescribeRecord: %d %v", st, err)
	}
	req.Header.Set("Authorization", "Bearer bob")
	if other, _ := m.StoreKey(req); other == key {
		t.Fatal("two principals share a store key")
	}
	req.Header.Del("Authorization")
	if _, err := m.StoreKey(req); !errors.Is(err, idemhttp.ErrNoPrincipal) {
		t.Fatalf("no principal: %v", err)
	}
}
