package idemhttp_test

// Tests of the handler's context (issue 28): it outlives the client, ends
// on the handler timeout, Abort and (TestLostLeaseCancels) lease loss,
// carries the key and the claim; WithClientCancel restores net/http's
// cancellation.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/internal/testsupport/dbtest"
	"github.com/idem-go/idem/internal/testsupport/httptestx"
	"github.com/idem-go/idem/keystore"
)

// chargeHandler models a handler that calls a payment provider with
// r.Context(): the provider charges as soon as it receives the call, and
// answers after work; a handler whose context ends before the answer fails
// (502), as a Go HTTP client cut by its context does, though the charge
// was made.
func chargeHandler(work time.Duration, charges *httptestx.Ledger) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		n := charges.Charge(key)
		select {
		case <-time.After(work):
		case <-r.Context().Done():
			http.Error(w, "provider call cancelled: "+context.Cause(r.Context()).Error(), http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "charge %s #%d", key, n)
	}
}

// A client whose timeout (50 ms) is shorter than the handler (200 ms)
// retries with the same key until it gets a 2xx: every key is charged
// exactly once, and the retry that succeeds is the first execution's
// response replayed. Before the handler's context was detached from the
// client, each timed-out attempt cut the handler off (502), released the
// key, and the next attempt charged again.
func TestClientTimeoutDoesNotRepeatTheEffect(t *testing.T) {
	t.Parallel()
	var charges httptestx.Ledger
	m := memMiddleware(t)
	srv := httptest.NewServer(m.Handler(chargeHandler(200*time.Millisecond, &charges)))
	t.Cleanup(srv.Close)
	finals := charges.Retry(20, func(key string, timeout time.Duration) (string, bool, bool) {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/charge", strings.NewReader(`{"amount":3}`))
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Authorization", "Bearer alice")
		res, err := (&http.Client{Timeout: timeout}).Do(req)
		if err != nil {
			// Timed out: retry with the same key, unless the test is over.
			return "", false, t.Context().Err() != nil
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode/100 != 2 {
			// 409 while the first attempt runs: a client's back-off.
			time.Sleep(10 * time.Millisecond)
			return "", false, false
		}
		return fmt.Sprintf("%d %s", res.StatusCode, b), res.Header.Get("Idempotent-Replayed") == "true", true
	})
	charges.CheckChargedOnce(t, finals, func(key string) string { return fmt.Sprintf("%d charge %s #1", http.StatusCreated, key) })
}

// blockingHandler reports its context's Err and cause once it ends.
type blockingHandler struct {
	started chan struct{}
	ended   chan error // ctx.Err(), then context.Cause
}

func newBlockingHandler() *blockingHandler {
	return &blockingHandler{started: make(chan struct{}, 1), ended: make(chan error, 2)}
}

func (h *blockingHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.started <- struct{}{}
	<-r.Context().Done()
	h.ended <- r.Context().Err()
	h.ended <- context.Cause(r.Context())
	w.WriteHeader(http.StatusServiceUnavailable)
}

// waitEnded returns the Err and cause of the handler's context, or fails
// the test once its context ends.
func (h *blockingHandler) waitEnded(t *testing.T, what string) (error, error) {
	t.Helper()
	select {
	case err := <-h.ended:
		return err, <-h.ended
	case <-t.Context().Done():
		t.Fatalf("the handler's context did not end on %s", what)
		return nil, nil
	}
}

// serveBlocking serves a blockingHandler behind a middleware with
// options opts on a memory store.
func serveBlocking(t *testing.T, opts ...idemhttp.Option) (*idemhttp.Middleware, *blockingHandler, *httptest.Server) {
	t.Helper()
	m := memMiddleware(t, opts...)
	h := newBlockingHandler()
	srv := httptest.NewServer(m.Handler(h))
	t.Cleanup(srv.Close)
	return m, h, srv
}

func waitStarted(t *testing.T, started <-chan struct{}) {
	t.Helper()
	select {
	case <-started:
	case <-t.Context().Done():
		t.Fatal("the handler did not start")
	}
}

// sendAsync sends a keyed POST under ctx and returns its status (or -1)
// on the channel.
func sendAsync(ctx context.Context, url, key string) <-chan int {
	out := make(chan int, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader("x"))
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Authorization", "Bearer alice")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- -1
			return
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		out <- res.StatusCode
	}()
	return out
}

// WithHandlerTimeout ends the handler's context with DeadlineExceeded; the
// handler's 503 releases the key.
func TestHandlerTimeout(t *testing.T) {
	t.Parallel()
	_, h, srv := serveBlocking(t, idemhttp.WithHandlerTimeout(50*time.Millisecond))
	got := sendAsync(t.Context(), srv.URL, "k")
	errc, cause := h.waitEnded(t, "the handler timeout")
	if !errors.Is(errc, context.DeadlineExceeded) || !errors.Is(cause, context.DeadlineExceeded) {
		t.Fatalf("Err %v, cause %v; want DeadlineExceeded", errc, cause)
	}
	if code := <-got; code != http.StatusServiceUnavailable {
		t.Fatalf("answer %d, want the handler's 503", code)
	}
	if _, err := idemhttp.New(dbtest.MemStore(t), idemhttp.WithHandlerTimeout(-time.Second)); err == nil {
		t.Fatal("a negative handler timeout was accepted")
	}
}

// WithClientCancel(true) restores net/http's behaviour: the client's
// disconnect ends the handler's context.
func TestClientCancelOptOut(t *testing.T) {
	t.Parallel()
	_, h, srv := serveBlocking(t, idemhttp.WithClientCancel(true))
	ctx, cancel := context.WithCancel(t.Context())
	got := sendAsync(ctx, srv.URL, "k")
	waitStarted(t, h.started)
	cancel()
	if errc, _ := h.waitEnded(t, "the client's disconnect"); !errors.Is(errc, context.Canceled) {
		t.Fatalf("Err %v, want Canceled", errc)
	}
	<-got
}

// Shutdown: once http.Server.Shutdown's grace period has passed, Abort
// ends the contexts of the handlers still running, and of any that start
// later.
func TestAbortEndsHandlers(t *testing.T) {
	t.Parallel()
	m, h, srv := serveBlocking(t)
	got := sendAsync(t.Context(), srv.URL, "k1")
	waitStarted(t, h.started)
	grace, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	if err := srv.Config.Shutdown(grace); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v, want its grace period to pass with the handler running", err)
	}
	m.Abort()
	if errc, cause := h.waitEnded(t, "Abort"); !errors.Is(errc, context.Canceled) || cause == nil || !strings.Contains(cause.Error(), "abort") {
		t.Fatalf("Err %v, cause %v; want Canceled by the abort", errc, cause)
	}
	if code := <-got; code != http.StatusServiceUnavailable {
		t.Fatalf("answer %d, want the handler's 503 delivered", code)
	}
	// A handler that starts after Abort finds its context ended.
	after := httptest.NewServer(m.Handler(h))
	t.Cleanup(after.Close)
	got = sendAsync(t.Context(), after.URL, "k2")
	waitStarted(t, h.started)
	h.waitEnded(t, "an earlier Abort")
	<-got
}

// The handler reads the parsed key and the claim from its context.
func TestKeyAndClaimInContext(t *testing.T) {
	t.Parallel()
	s := dbtest.MemStore(t)
	m, err := idemhttp.New(s)
	if err != nil {
		t.Fatal(err)
	}
	type seen struct {
		key      string
		keyOK    bool
		claim    keystore.Claim
		claimOK  bool
		parentOK bool
	}
	seenc := make(chan seen, 1)
	srv := httptest.NewServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k, kok := idemhttp.KeyFrom(r.Context())
		c, cok := idemhttp.ClaimFrom(r.Context())
		seenc <- seen{k, kok, c, cok, r.Context().Value(ctxMarker{}) == "kept"}
	})))
	t.Cleanup(srv.Close)
	// A value of the request's context (an earlier middleware's) is kept.
	srv.Config.Handler = withMarker(srv.Config.Handler)
	if code, _, _ := keyed(t, srv.URL, "/x", `"order-42"`); code != http.StatusOK {
		t.Fatalf("answer %d", code)
	}
	got := <-seenc
	if !got.keyOK || got.key != "order-42" {
		t.Errorf("KeyFrom: %q %v, want order-42 unquoted", got.key, got.keyOK)
	}
	if !got.claimOK || got.claim.State != keystore.Acquired || got.claim.Token == 0 || got.claim.Takeover || got.claim.Key == "" {
		t.Errorf("ClaimFrom: %+v %v, want an Acquired claim with a token", got.claim, got.claimOK)
	}
	if !got.parentOK {
		t.Error("the request context's values were not kept")
	}
	if _, ok := idemhttp.KeyFrom(context.Background()); ok {
		t.Error("KeyFrom outside a handler reported a key")
	}
	if _, ok := idemhttp.ClaimFrom(context.Background()); ok {
		t.Error("ClaimFrom outside a handler reported a claim")
	}
}

type ctxMarker struct{}

func withMarker(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxMarker{}, "kept")))
	})
}
