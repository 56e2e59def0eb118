package idemhttp_test

// Issue 28 item 5: an operator releases a key while its request runs. The
// holder's lease is lost, its handler's context (a Proxy's upstream call)
// is cancelled, and the key is free: the proxy answers 503 lease-lost, not
// a 502 saying it released the key, and nobody logs that a release failed.

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/internal/testsupport/httptestx"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/storetest"
)

// outcomes records the Outcomes reported to Hooks.
type outcomes struct {
	httptestx.Outcomes[idemhttp.Outcome]
}

func (o *outcomes) Request(oc idemhttp.Outcome, _ time.Duration) { o.Add(oc) }

// operatorRelease releases the key of a request with key k (and
// Authorization "Bearer alice") in s as `idem keys release` does: the
// fenced release with the token the store shows.
func operatorRelease(t *testing.T, s *storetest.RefStore, k string) {
	t.Helper()
	m, err := idemhttp.New(s)
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPost, "/x", nil)
	req.Header.Set("Idempotency-Key", k)
	req.Header.Set("Authorization", "Bearer alice")
	sk, err := m.StoreKey(req)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Inspect(t.Context(), sk)
	if err != nil || info.State != keystore.InProgress {
		t.Fatalf("the running request's key: %+v %v, want in progress", info, err)
	}
	if err := keystore.ReleaseToken(t.Context(), s, sk, info.Token); err != nil {
		t.Fatalf("operator release: %v", err)
	}
}

func TestOperatorReleaseWhileRunning(t *testing.T) {
	t.Parallel()
	forEachMode(t, func(t *testing.T, proxy bool) {
		s := storetest.NewRefStore()
		var logs testenv.SyncBuffer
		var seen outcomes
		opts := []idemhttp.Option{
			idemhttp.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))),
			idemhttp.WithHooks(&seen),
		}
		var runs atomic.Int32
		started := make(chan struct{}, 2)
		// The handler (the upstream) answers 201 at once from its
		// second run on; the first waits until its context ends
		// (the proxy drops the upstream connection) and then
		// answers 502, as a handler whose provider call was cut
		// does.
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if runs.Add(1) > 1 {
				w.WriteHeader(http.StatusCreated)
				return
			}
			// Read the body: net/http then watches the connection, and
			// an upstream's context ends when the proxy drops it.
			_, _ = io.ReadAll(r.Body)
			started <- struct{}{}
			select {
			case <-r.Context().Done():
				http.Error(w, "cancelled", http.StatusBadGateway)
			case <-time.After(20 * testLease):
				w.WriteHeader(http.StatusCreated)
			}
		})
		srv := serveKeyed(t, s, h, proxy, opts...)

		type answer struct {
			code int
			hdr  http.Header
			body string
		}
		done := make(chan answer, 1)
		go func() {
			code, hdr, body := keyed(t, srv.URL, "/x", "k")
			done <- answer{code, hdr, body}
		}()
		waitStarted(t, started)
		operatorRelease(t, s, "k")
		var a answer
		select {
		case a = <-done:
		case <-time.After(10 * testLease):
			t.Fatal("the request did not end once its key was released (the lease loss did not cancel it)")
		}

		if proxy {
			var p struct {
				Type   string `json:"type"`
				Status int    `json:"status"`
				Detail string `json:"detail"`
			}
			_ = json.Unmarshal([]byte(a.body), &p)
			if a.code != http.StatusServiceUnavailable || !strings.HasSuffix(p.Type, "#lease-lost") || a.hdr.Get("Retry-After") != "1" {
				t.Fatalf("answer %d Retry-After %q %s, want 503 lease-lost with Retry-After: 1", a.code, a.hdr.Get("Retry-After"), a.body)
			}
			if !strings.Contains(p.Detail, "an operator released this key") || !strings.Contains(p.Detail, "retry with the same key") {
				t.Fatalf("detail %q", p.Detail)
			}
		} else if a.code != http.StatusBadGateway {
			t.Fatalf("answer %d %s, want the handler's 502", a.code, a.body)
		}
		if o := seen.First(); o != idemhttp.OutcomeLeaseLost {
			t.Fatalf("outcome %q, want %q", o, idemhttp.OutcomeLeaseLost)
		}
		out := logs.String()
		if strings.Contains(out, "level=ERROR") || strings.Contains(out, "release failed") {
			t.Fatalf("an ERROR was logged for a key an operator released:\n%s", out)
		}
		if !strings.Contains(out, "released by an operator") {
			t.Fatalf("the log does not say the key was released by an operator:\n%s", out)
		}
		// The key is free: the retry executes.
		if code, hdr, body := keyed(t, srv.URL, "/x", "k"); code != http.StatusCreated || hdr.Get("Idempotent-Replayed") == "true" {
			t.Fatalf("retry: %d replayed=%q %s, want 201 executed", code, hdr.Get("Idempotent-Replayed"), body)
		}
	})
}

// A lease the store could not renew in time (it did not answer) may still
// be this request's: the proxy answers 503 lease-lost saying so, and
// releases the key, so the retry executes.
func TestProxyLeaseNotRenewed(t *testing.T) {
	t.Parallel()
	s := storetest.NewRefStore()
	var runs atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		if runs.Add(1) > 1 {
			w.WriteHeader(http.StatusCreated)
			return
		}
		s.FailExtend(errors.New("store unreachable"))
		select {
		case <-r.Context().Done():
		case <-time.After(20 * testLease):
		}
		s.FailExtend(nil)
	}))
	t.Cleanup(up.Close)
	srv := serveProxy(t, up.URL, s, idemhttp.WithLease(testLease))
	code, hdr, body := keyed(t, srv.URL, "/x", "k")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "#lease-lost") || !strings.Contains(body, "could not renew") || hdr.Get("Retry-After") != "1" {
		t.Fatalf("answer %d Retry-After %q %s, want 503 lease-lost (not renewed)", code, hdr.Get("Retry-After"), body)
	}
	if code, hdr, body := keyed(t, srv.URL, "/x", "k"); code != http.StatusCreated || hdr.Get("Idempotent-Replayed") == "true" {
		t.Fatalf("retry: %d replayed=%q %s, want 201 executed (the key was released)", code, hdr.Get("Idempotent-Replayed"), body)
	}
}
