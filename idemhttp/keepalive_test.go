package idemhttp_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/storetest"
)

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
// Proxy to an upstream running h, with store s and a lease of testLease.
func serveKeyed(t *testing.T, s keystore.Store, h http.Handler, proxy bool) *httptest.Server {
	t.Helper()
	var handler http.Handler
	if proxy {
		up := httptest.NewServer(h)
		t.Cleanup(up.Close)
		target, _ := url.Parse(up.URL)
		p, err := idemhttp.NewProxy(target, s, idemhttp.WithLease(testLease))
		if err != nil {
			t.Fatal(err)
		}
		handler = p
	} else {
		m, err := idemhttp.New(s, idemhttp.WithLease(testLease))
		if err != nil {
			t.Fatal(err)
		}
		handler = m.Handler(h)
	}
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	return srv
}

// A handler (middleware) or upstream (proxy) 3.5x its lease, with 4
// retriers: the lease is renewed, it runs once, and the retriers get its
// response replayed.
func TestRenewsLease(t *testing.T) {
	t.Parallel()
	for _, proxy := range []bool{false, true} {
		t.Run(map[bool]string{false: "middleware", true: "proxy"}[proxy], func(t *testing.T) {
			t.Parallel()
			var runs atomic.Int32
			started := make(chan struct{})
			srv := serveKeyed(t, storetest.NewRefStore(), slowHandler(&runs, started), proxy)
			first, retries := slowRuns(t, srv, started)
			checkOnce(t, runs.Load(), first, retries)
		})
	}
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
	for _, proxy := range []bool{false, true} {
		name := map[bool]string{false: "middleware", true: "proxy"}[proxy]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
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
			select {
			case <-ended:
			default:
				t.Fatalf("the %s's handler was not cancelled when the lease was lost (answer %d)", name, code)
			}
			if c, _ := cause.Load().(error); !proxy && !errors.Is(c, keystore.ErrLeaseLost) {
				t.Fatalf("cause %v, want ErrLeaseLost", c)
			}
		})
	}
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
