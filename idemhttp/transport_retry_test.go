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
)

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
			target, _ := url.Parse(up.URL)
			p, err := idemhttp.NewProxy(target, memStore(t))
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(p)
			defer srv.Close()
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
