package idemhttp_test

import (
	"bufio"
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
	"github.com/idem-go/idem/keystore/memstore"
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
			m, err := idemhttp.New(memStore(t), tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
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
			store := &countingStore{Store: memStore(t)}
			m, err := idemhttp.New(store, idemhttp.WithBodyTimeout(300*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) })))
			defer srv.Close()
			conn, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprintf(conn, "POST /orders HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k\r\nAuthorization: Bearer a\r\n%s\r\n", tc.head)
			stop := make(chan struct{})
			defer close(stop)
			if tc.drip != "" {
				go func() {
					for {
						select {
						case <-stop:
							return
						case <-time.After(50 * time.Millisecond):
							if _, err := io.WriteString(conn, tc.drip); err != nil {
								return
							}
						}
					}
				}()
			}
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second)) // a hung server fails, not hangs
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

// Case 3: concurrent uploads past the buffered-bytes bound are refused at
// once with 503 and Retry-After, and the bound holds.
func TestBufferedBytesBound(t *testing.T) {
	t.Parallel()
	const (
		uploads = 16
		size    = 1 << 20
		bound   = 4 << 20
	)
	m, err := idemhttp.New(memStore(t), idemhttp.WithMaxRequestBody(size), idemhttp.WithMaxBufferedBytes(bound))
	if err != nil {
		t.Fatal(err)
	}
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
	m, err := idemhttp.New(ms, idemhttp.WithMaxResponseBody(size), idemhttp.WithClientWriteTimeout(200*time.Millisecond), idemhttp.WithLease(time.Minute))
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
	deadline := time.Now().Add(15 * time.Second)
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
