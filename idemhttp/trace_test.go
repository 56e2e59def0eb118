package idemhttp_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/internal/testsupport/dbtest"
	"github.com/idem-go/idem/internal/tracing"
	"github.com/idem-go/idem/keystore"
)

// tracedStore starts a span around each call, with the call's context, as
// idemotel.WrapStore does, so that the tests see where store calls nest.
type tracedStore struct {
	keystore.Store
	rec  *tracing.Recorder
	down bool
}

func (s *tracedStore) Reserve(ctx context.Context, key string, fp []byte, lease time.Duration) (keystore.Claim, error) {
	_, sp := s.rec.Start(ctx, idem.OpKeystoreReserve)
	defer sp.End("", nil)
	if s.down {
		return keystore.Claim{}, errDown
	}
	return s.Store.Reserve(ctx, key, fp, lease)
}

func (s *tracedStore) Complete(ctx context.Context, c keystore.Claim, result []byte, ttl time.Duration) error {
	_, sp := s.rec.Start(ctx, idem.OpKeystoreComplete)
	defer sp.End("", nil)
	return s.Store.Complete(ctx, c, result, ttl)
}

func (s *tracedStore) Release(ctx context.Context, c keystore.Claim) error {
	_, sp := s.rec.Start(ctx, idem.OpKeystoreRelease)
	defer sp.End("", nil)
	return s.Store.Release(ctx, c)
}

type traceFixture struct {
	t     *testing.T
	rec   *tracing.Recorder
	store *tracedStore
	h     http.Handler
}

// newTraceFixture serves handler h under the middleware, behind a
// ServeMux pattern.
func newTraceFixture(t *testing.T, h http.HandlerFunc, opts ...idemhttp.Option) *traceFixture {
	t.Helper()
	ms := dbtest.MemStore(t)
	f := &traceFixture{t: t, rec: &tracing.Recorder{}}
	f.store = &tracedStore{Store: ms, rec: f.rec}
	m, err := idemhttp.New(f.store, append([]idemhttp.Option{idemhttp.WithTracer(f.rec)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/orders/{id}", m.Handler(h))
	f.h = mux
	return f
}

func (f *traceFixture) do(method, key, body string, hdr ...string) int {
	r := httptest.NewRequest(method, "/orders/7", strings.NewReader(body))
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	r.Header.Set("Authorization", "Bearer test-client")
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	return w.Code
}

func TestWithTracerRejectsNil(t *testing.T) {
	ms := dbtest.MemStore(t)
	if _, err := idemhttp.New(ms, idemhttp.WithTracer(nil)); !errors.Is(err, idem.ErrInvalidOption) {
		t.Fatalf("WithTracer(nil): %v", err)
	}
}

// One span per keyed request, with its outcome, the route, the client's
// key (hashed by the real tracer), a link to the request's traceparent,
// and the store calls and the handler's work nested under it.
func TestTraceRequests(t *testing.T) {
	var f *traceFixture
	f = newTraceFixture(t, func(w http.ResponseWriter, r *http.Request) {
		_, s := f.rec.Start(r.Context(), "handler")
		s.End("ok", nil)
		w.WriteHeader(http.StatusCreated)
	})
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	codes := []int{
		f.do("POST", "client-key-1", "a", "traceparent", tp),
		f.do("POST", "client-key-1", "a"),
		f.do("POST", "client-key-1", "b"),
		f.do("POST", "", "a"),            // no key: passes through, no span
		f.do("GET", "client-key-1", "a"), // not a keyed method: no span
		f.do("POST", "bad\x01key", "a"),  // invalid key: 400
	}
	if want := []int{201, 201, 422, 201, 201, 400}; !slices.Equal(codes, want) {
		t.Fatalf("statuses %v, want %v", codes, want)
	}
	spans := f.rec.Named(idem.OpHTTPRequest)
	outcomes := []string{"executed", "replayed", "mismatch", "bad_request"}
	if len(spans) != len(outcomes) {
		t.Fatalf("%d request spans, want %d", len(spans), len(outcomes))
	}
	for i, o := range outcomes {
		s := spans[i]
		if s.Result != o || s.Ended != 1 || s.Err != nil {
			t.Errorf("span %d: %q ended %d times, err %v; want %q once", i, s.Result, s.Ended, s.Err, o)
		}
		if s.Attrs[idem.AttrRoute] != "/orders/{id}" {
			t.Errorf("span %d: route %v", i, s.Attrs[idem.AttrRoute])
		}
	}
	if spans[0].Key != "client-key-1" || spans[3].Key != "" {
		t.Fatalf("keys %q, %q: want the client's key, none for an invalid one", spans[0].Key, spans[3].Key)
	}
	if len(spans[0].Links) != 1 || spans[0].Links[0].Get("traceparent") != tp {
		t.Fatalf("links %v, want the request's traceparent", spans[0].Links)
	}
	under := map[int][]string{}
	for _, s := range f.rec.Spans() {
		under[s.Parent] = append(under[s.Parent], s.Op)
	}
	if got := strings.Join(under[spans[0].ID], ","); got != "idem.keystore.reserve,handler,idem.keystore.complete" {
		t.Fatalf("under the executed request: %s", got)
	}
	if got := strings.Join(under[spans[1].ID], ","); got != "idem.keystore.reserve" {
		t.Fatalf("under the replayed request: %s", got)
	}
}

// The failing outcomes mark the span failed; a panicking handler ends it.
func TestTraceFailures(t *testing.T) {
	f := newTraceFixture(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Panic") != "" {
			panic("handler broke")
		}
		w.WriteHeader(http.StatusOK)
	})
	f.store.down = true
	if code := f.do("POST", "k-1", ""); code != http.StatusServiceUnavailable {
		t.Fatalf("store down: %d", code)
	}
	f.store.down = false
	func() {
		defer func() {
			if p := recover(); p != "handler broke" {
				t.Fatalf("recovered %v", p)
			}
		}()
		f.do("POST", "k-2", "", "X-Panic", "1")
	}()
	spans := f.rec.Named(idem.OpHTTPRequest)
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	if s := spans[0]; s.Result != "store_error" || s.Err == nil {
		t.Fatalf("store down: %q %v", s.Result, s.Err)
	}
	if s := spans[1]; s.Result != "panic" || s.Err == nil || s.Ended != 1 {
		t.Fatalf("panic: %q %v ended %d", s.Result, s.Err, s.Ended)
	}
	// The panicking request's key was released under its span.
	var released bool
	for _, s := range f.rec.Named(idem.OpKeystoreRelease) {
		released = released || s.Parent == spans[1].ID
	}
	if !released {
		t.Fatal("no release span under the panicking request")
	}
}

// Concurrent requests with one key: one span each, ended once; exactly one
// executed, the others in progress or replayed.
func TestTraceConcurrentRequests(t *testing.T) {
	release := make(chan struct{})
	f := newTraceFixture(t, func(w http.ResponseWriter, r *http.Request) {
		<-release
		w.WriteHeader(http.StatusCreated)
	})
	var wg sync.WaitGroup
	wg.Go(func() { f.do("POST", "same", "") })
	for len(f.rec.Named(idem.OpKeystoreReserve)) == 0 {
		time.Sleep(time.Millisecond)
	}
	for range 8 {
		wg.Go(func() { f.do("POST", "same", "") })
	}
	for len(f.rec.Named(idem.OpKeystoreReserve)) < 9 {
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	count := map[string]int{}
	for _, s := range f.rec.Named(idem.OpHTTPRequest) {
		if s.Ended != 1 {
			t.Fatalf("span ended %d times", s.Ended)
		}
		count[s.Result]++
	}
	if count["executed"] != 1 || count["executed"]+count["in_progress"]+count["replayed"] != 9 {
		t.Fatalf("outcomes %v, want 1 executed and 8 in_progress or replayed", count)
	}
}

// The proxy traces as the middleware does.
func TestTraceProxy(t *testing.T) {
	var gotSpan atomic.Value
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotSpan.Store(r.Header.Get(tracing.InjectHeader))
		w.WriteHeader(http.StatusCreated)
	}))
	defer up.Close()
	target, _ := url.Parse(up.URL)
	ms := dbtest.MemStore(t)
	rec := &tracing.Recorder{}
	p, err := idemhttp.NewProxy(target, &tracedStore{Store: ms, rec: rec}, idemhttp.WithTracer(rec))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		r := httptest.NewRequest("POST", "/pay", strings.NewReader("x"))
		r.Header.Set("Idempotency-Key", "pay-1")
		r.Header.Set("Authorization", "Bearer c")
		w := httptest.NewRecorder()
		p.ServeHTTP(w, r)
		if w.Code != http.StatusCreated {
			t.Fatalf("status %d", w.Code)
		}
	}
	spans := rec.Named(idem.OpHTTPRequest)
	if len(spans) != 2 || spans[0].Result != "executed" || spans[1].Result != "replayed" {
		t.Fatalf("proxy spans %+v", spans)
	}
	if got, want := gotSpan.Load(), strconv.Itoa(spans[0].ID); got != want {
		t.Fatalf("the upstream got span %q, want the request's %q", got, want)
	}
	if _, ok := spans[0].Attrs[idem.AttrRoute]; ok {
		t.Fatal("route recorded without a ServeMux pattern")
	}
}
