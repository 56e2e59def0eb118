package idemhttp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/internal/testsupport/dbtest"
)

// One Budget shared by two Middlewares bounds their bodies together: a body
// held by one leaves no room for the other's, and both give it back.
func TestBudgetSharedAcrossMiddlewares(t *testing.T) {
	t.Parallel()
	b, err := idemhttp.NewBudget(64 << 10)
	if err != nil {
		t.Fatal(err)
	}
	opts := []idemhttp.Option{idemhttp.WithBudget(b), idemhttp.WithMaxRequestBody(40 << 10)}
	m1 := memMiddleware(t, opts...)
	m2 := memMiddleware(t, opts...)
	entered, release := make(chan struct{}), make(chan struct{})
	held := m1.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		w.WriteHeader(201)
	}))
	other := m2.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) }))
	keyed := func(key string) *http.Request {
		r := httptest.NewRequest("POST", "/orders", strings.NewReader(strings.Repeat("x", 40<<10)))
		r.Header.Set("Idempotency-Key", key)
		r.Header.Set("Authorization", "Bearer a")
		return r
	}
	done := make(chan int)
	go func() {
		w := httptest.NewRecorder()
		held.ServeHTTP(w, keyed("k1"))
		done <- w.Code
	}()
	<-entered
	if b.Used() == 0 {
		t.Fatal("the held body is not accounted in the shared budget")
	}
	w := httptest.NewRecorder()
	other.ServeHTTP(w, keyed("k2"))
	if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "busy") {
		t.Fatalf("second middleware while the first holds the budget: %d %s, want 503 busy", w.Code, w.Body)
	}
	close(release)
	if c := <-done; c != 201 {
		t.Fatalf("held request: %d", c)
	}
	if b.Used() != 0 {
		t.Fatalf("budget not given back: %d bytes held", b.Used())
	}
	w = httptest.NewRecorder()
	other.ServeHTTP(w, keyed("k2"))
	if w.Code != 201 {
		t.Fatalf("second middleware once the budget is free: %d", w.Code)
	}
}

type countingTransport struct{ n atomic.Int32 }

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return http.DefaultTransport.RoundTrip(r)
}

// The Proxy reaches the upstream through the caller's transport, and sets
// the forwarding headers with the caller's function, which sees none of the
// client's.
func TestProxyTransportAndForwarded(t *testing.T) {
	t.Parallel()
	var got atomic.Value
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Header.Clone())
		w.WriteHeader(201)
	}))
	defer up.Close()
	target, _ := url.Parse(up.URL)
	rt := &countingTransport{}
	var sawIncoming atomic.Bool
	p, err := idemhttp.NewProxy(target, dbtest.MemStore(t), idemhttp.WithUpstreamTransport(rt),
		idemhttp.WithForwarded(func(in *http.Request, out http.Header) {
			if out.Get("X-Forwarded-For") != "" || out.Get("Forwarded") != "" {
				sawIncoming.Store(true)
			}
			out.Set("X-Forwarded-For", "set-by-caller, "+in.Header.Get("X-Forwarded-For"))
		}))
	if err != nil {
		t.Fatal(err)
	}
	for _, keyed := range []bool{true, false} {
		r := httptest.NewRequest("POST", "/orders", strings.NewReader("x"))
		if keyed {
			r.Header.Set("Idempotency-Key", "k")
		}
		r.Header.Set("Authorization", "Bearer a")
		r.Header.Set("X-Forwarded-For", "10.9.9.9")
		r.Header.Set("Forwarded", "for=10.9.9.9")
		w := httptest.NewRecorder()
		p.ServeHTTP(w, r)
		if w.Code != 201 {
			t.Fatalf("keyed=%v: %d %s", keyed, w.Code, w.Body)
		}
		h := got.Load().(http.Header)
		if h.Get("X-Forwarded-For") != "set-by-caller, 10.9.9.9" || h.Get("Forwarded") != "" {
			t.Errorf("keyed=%v: upstream got X-Forwarded-For %q Forwarded %q", keyed, h.Get("X-Forwarded-For"), h.Get("Forwarded"))
		}
	}
	if rt.n.Load() != 2 {
		t.Errorf("caller's transport carried %d calls, want 2", rt.n.Load())
	}
	if sawIncoming.Load() {
		t.Error("the forwarded func saw the client's forwarding headers in the outbound request")
	}
}

// net/http's Transport treats a request that carries an Idempotency-Key
// header (and has no body, or one it can rewind) as safe to send twice: when
// a reused connection fails after the request was written and before the
// response's first byte, it sends the request again on a new connection. The
// upstream may have acted on the first copy, so the proxy must never let the
// Transport do that: the key is released (outcome unknown) and the decision
// to retry stays with the client, whose retry goes through the key store.
func TestProxyTransportDoesNotResendKeyedRequests(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body string
		header     string
	}{
		{"empty body, Idempotency-Key", "", "Idempotency-Key"},
		{"empty body, X-Idempotency-Key too", "", "X-Idempotency-Key"},
		{"with a body", `{"amount":5}`, "Idempotency-Key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var runs atomic.Int32
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				if r.Header.Get("Idempotency-Key") == "" {
					t.Errorf("upstream got no Idempotency-Key: %v", r.Header)
				}
				if r.Header.Get("Idempotency-Key") == "warm-up" {
					w.WriteHeader(http.StatusCreated) // leaves an idle connection to reuse
					return
				}
				runs.Add(1)
				// Acted, then the connection closes before any response byte:
				// to the Transport this is a reused connection that the server
				// closed, which it retries for requests it deems replayable.
				conn, _, err := http.NewResponseController(w).Hijack()
				if err != nil {
					t.Error(err)
					return
				}
				conn.Close()
			}))
			defer up.Close()
			srv := serveProxy(t, up.URL, dbtest.MemStore(t))
			send := func(key string) int {
				req, _ := http.NewRequest("POST", srv.URL+"/charges", strings.NewReader(tc.body))
				req.Header.Set("Idempotency-Key", key)
				if tc.header != "Idempotency-Key" {
					req.Header.Set(tc.header, key)
				}
				req.Header.Set("Authorization", "Bearer alice")
				res, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer res.Body.Close()
				_, _ = io.Copy(io.Discard, res.Body)
				return res.StatusCode
			}
			if code := send("warm-up"); code != http.StatusCreated {
				t.Fatalf("warm-up: %d", code)
			}
			if code := send("charge-1"); code != http.StatusBadGateway {
				t.Fatalf("upstream closed without a response: got %d, want 502 (outcome unknown)", code)
			}
			if n := runs.Load(); n != 1 {
				t.Fatalf("the upstream received the keyed request %d times from one client request: the proxy's Transport re-sent it", n)
			}
		})
	}
}
