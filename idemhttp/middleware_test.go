package idemhttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/internal/testsupport/dbtest"
	"github.com/idem-go/idem/keystore"
)

// countingStore counts calls, and fails them all when down is set.
type countingStore struct {
	keystore.Store
	calls atomic.Int32
	down  atomic.Bool
}

var errDown = errors.New("connection refused")

func (s *countingStore) Reserve(ctx context.Context, key string, fp []byte, lease time.Duration) (keystore.Claim, error) {
	s.calls.Add(1)
	if s.down.Load() {
		return keystore.Claim{}, errDown
	}
	return s.Store.Reserve(ctx, key, fp, lease)
}

func (s *countingStore) Complete(ctx context.Context, c keystore.Claim, result []byte, ttl time.Duration) error {
	s.calls.Add(1)
	return s.Store.Complete(ctx, c, result, ttl)
}

func (s *countingStore) Release(ctx context.Context, c keystore.Claim) error {
	s.calls.Add(1)
	return s.Store.Release(ctx, c)
}

// upstream is a handler that counts executions per path and answers as told.
type upstream struct {
	mu    sync.Mutex
	execs map[string]int
	total atomic.Int32
	hook  func(w http.ResponseWriter, r *http.Request) bool // true: handled
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.total.Add(1)
	body, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.execs[r.URL.Path]++
	n := u.execs[r.URL.Path]
	u.mu.Unlock()
	if u.hook != nil && u.hook(w, r) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/orders/1")
	w.Header().Set("Set-Cookie", "session=secret")
	w.Header().Set("X-Request-Id", "req-"+strings.Repeat("x", n))
	w.Header().Set("X-Ratelimit-Remaining", "41")
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, `{"order":1,"echo":"`+string(body)+`"}`)
}

type fixture struct {
	t         *testing.T
	anonymous bool // send no Authorization header
	store     *countingStore
	up        *upstream
	h         http.Handler
}

func newFixture(t *testing.T, opts ...idemhttp.Option) *fixture {
	t.Helper()
	ms := dbtest.MemStore(t)
	f := &fixture{t: t, store: &countingStore{Store: ms}, up: &upstream{execs: map[string]int{}}}
	m, err := idemhttp.New(f.store, opts...)
	if err != nil {
		t.Fatal(err)
	}
	f.h = m.Handler(f.up)
	return f
}

func (f *fixture) do(method, path, key, body string, hdr ...string) *http.Response {
	f.t.Helper()
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	if r.Header.Get("Authorization") == "" && !f.anonymous {
		r.Header.Set("Authorization", "Bearer test-client") // keyed requests need a principal
	}
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	return w.Result()
}

func bodyOf(t *testing.T, r *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func problemType(t *testing.T, r *http.Response) string {
	t.Helper()
	if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("status %d Content-Type %q, want application/problem+json", r.StatusCode, ct)
	}
	var p struct {
		Type   string
		Status int
	}
	if err := json.Unmarshal([]byte(bodyOf(t, r)), &p); err != nil {
		t.Fatal(err)
	}
	if p.Status != r.StatusCode || !strings.Contains(p.Type, "docs/http.md#") {
		t.Fatalf("problem %+v for status %d", p, r.StatusCode)
	}
	return p.Type[strings.IndexByte(p.Type, '#')+1:]
}

func TestReplay(t *testing.T) {
	f := newFixture(t)
	first := f.do("POST", "/orders", `"k-1"`, "pen")
	firstBody := bodyOf(t, first)
	if first.StatusCode != 201 || first.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first: %d %v", first.StatusCode, first.Header)
	}
	for i := 0; i < 3; i++ {
		again := f.do("POST", "/orders", `"k-1"`, "pen", "User-Agent", "retry/1")
		if again.StatusCode != 201 || bodyOf(t, again) != firstBody {
			t.Fatalf("replay %d: status %d, body differs", i, again.StatusCode)
		}
		h := again.Header
		if h.Get("Idempotent-Replayed") != "true" || h.Get("Location") != "/orders/1" || h.Get("Content-Type") != "application/json" {
			t.Fatalf("replay headers: %v", h)
		}
		for _, never := range []string{"Set-Cookie", "X-Request-Id", "X-Ratelimit-Remaining", "Date"} {
			if h.Get(never) != "" {
				t.Errorf("replay carried %s: %q", never, h.Get(never))
			}
		}
	}
	// A bare token is the same key as its sf-string form.
	if r := f.do("POST", "/orders", `k-1`, "pen"); r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("bare k-1 not replayed: %d", r.StatusCode)
	}
	if n := f.up.total.Load(); n != 1 {
		t.Fatalf("upstream executed %d times, want 1", n)
	}
}

func TestPassThroughWithoutStoreIO(t *testing.T) {
	f := newFixture(t)
	for _, m := range []string{"GET", "PUT", "DELETE", "HEAD"} {
		if r := f.do(m, "/orders", "k", ""); r.StatusCode != 201 {
			t.Fatalf("%s: %d", m, r.StatusCode)
		}
	}
	if r := f.do("POST", "/orders", "", "x"); r.StatusCode != 201 {
		t.Fatalf("POST without key, not required: %d", r.StatusCode)
	}
	if f.store.calls.Load() != 0 || f.up.total.Load() != 5 {
		t.Fatalf("store calls %d, executions %d", f.store.calls.Load(), f.up.total.Load())
	}
}

func TestBadKeys(t *testing.T) {
	f := newFixture(t, idemhttp.WithRequired(true))
	cases := map[string][]string{
		"missing":         {""},
		"empty sf":        {`""`},
		"too long":        {`"` + strings.Repeat("a", 256) + `"`},
		"non-ascii":       {"kéy"},
		"control":         {"k\x01y"},
		"space in bare":   {"a b"},
		"unterminated":    {`"abc`},
		"two in one":      {`"a", "b"`},
		"repeated":        {"a", "b"},
		"sf non-ascii":    {`"é"`},
		"bare with comma": {"a,b"},
	}
	for name, vals := range cases {
		r := httptest.NewRequest("POST", "/orders", strings.NewReader("x"))
		for _, v := range vals {
			if v != "" {
				r.Header.Add("Idempotency-Key", v)
			}
		}
		w := httptest.NewRecorder()
		f.h.ServeHTTP(w, r)
		res := w.Result()
		want := "invalid-key"
		if name == "missing" {
			want = "missing-key"
		}
		if res.StatusCode != 400 || problemType(t, res) != want {
			t.Errorf("%s: status %d", name, res.StatusCode)
		}
	}
	if f.up.total.Load() != 0 || f.store.calls.Load() != 0 {
		t.Fatalf("bad keys reached the handler (%d) or the store (%d)", f.up.total.Load(), f.store.calls.Load())
	}
	ok := `"` + strings.Repeat("a", 255) + `"`
	if r := f.do("POST", "/orders", ok, "x"); r.StatusCode != 201 {
		t.Fatalf("255-character key: %d", r.StatusCode)
	}
	strict := newFixture(t, idemhttp.WithStrictKey(true))
	if r := strict.do("POST", "/orders", "bare", "x"); r.StatusCode != 400 {
		t.Fatalf("strict mode accepted a bare key: %d", r.StatusCode)
	}
	if r := strict.do("POST", "/orders", `?1`, "x"); r.StatusCode != 400 {
		t.Fatalf("strict mode accepted a boolean item: %d", r.StatusCode)
	}
	if r := strict.do("POST", "/orders", `"quoted";p=1`, "x"); r.StatusCode != 201 {
		t.Fatalf("strict mode rejected an sf-string with a parameter: %d", r.StatusCode)
	}
}

func TestFingerprintMismatch(t *testing.T) {
	f := newFixture(t, idemhttp.WithFingerprintHeaders("X-Tenant"))
	if r := f.do("POST", "/orders?a=1&b=2", "k", "pen", "X-Tenant", "t1"); r.StatusCode != 201 {
		t.Fatal(r.StatusCode)
	}
	// Query order does not matter.
	if r := f.do("POST", "/orders?b=2&a=1", "k", "pen", "X-Tenant", "t1"); r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("reordered query not replayed: %d", r.StatusCode)
	}
	for name, r := range map[string]*http.Response{
		"body":   f.do("POST", "/orders?a=1&b=2", "k", "pencil", "X-Tenant", "t1"),
		"path":   f.do("POST", "/refunds?a=1&b=2", "k", "pen", "X-Tenant", "t1"),
		"query":  f.do("POST", "/orders?a=1&b=3", "k", "pen", "X-Tenant", "t1"),
		"method": f.do("PATCH", "/orders?a=1&b=2", "k", "pen", "X-Tenant", "t1"),
		"header": f.do("POST", "/orders?a=1&b=2", "k", "pen", "X-Tenant", "t2"),
	} {
		if r.StatusCode != 422 || problemType(t, r) != "key-reused" {
			t.Errorf("different %s: status %d, want 422", name, r.StatusCode)
		}
	}
	if r := f.do("POST", "/orders?a=1&b=2", "k", "pen", "X-Tenant", "t1"); r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatal("original record disturbed by the mismatches")
	}
	if f.up.total.Load() != 1 {
		t.Fatalf("executions %d", f.up.total.Load())
	}
}

func TestPrincipalsAreSeparate(t *testing.T) {
	f := newFixture(t)
	a := f.do("POST", "/orders", "k", "pen", "Authorization", "Bearer alice")
	b := f.do("POST", "/orders", "k", "pen", "Authorization", "Bearer bob")
	if a.Header.Get("Idempotent-Replayed") != "" || b.Header.Get("Idempotent-Replayed") != "" || f.up.total.Load() != 2 {
		t.Fatalf("two principals: executions %d, replayed %q %q", f.up.total.Load(), a.Header.Get("Idempotent-Replayed"), b.Header.Get("Idempotent-Replayed"))
	}
	// Each principal replays its own.
	if r := f.do("POST", "/orders", "k", "pen", "Authorization", "Bearer bob"); r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatal("bob's retry not replayed")
	}
	hf := newFixture(t, idemhttp.WithScopeHeader("X-Tenant"))
	if r := hf.do("POST", "/orders", "k", "pen"); r.StatusCode != 400 || problemType(t, r) != "invalid-scope" {
		t.Fatalf("missing scope header: %d", r.StatusCode)
	}
}

func TestInProgress(t *testing.T) {
	for _, wait := range []bool{false, true} {
		opts := []idemhttp.Option{idemhttp.WithLease(10 * time.Second)}
		if wait {
			opts = append(opts, idemhttp.WithWait(5*time.Second))
		}
		f := newFixture(t, opts...)
		release := make(chan struct{})
		entered := make(chan struct{})
		var once sync.Once
		f.up.hook = func(w http.ResponseWriter, r *http.Request) bool {
			once.Do(func() { close(entered) })
			<-release
			return false
		}
		done := make(chan *http.Response)
		go func() { done <- f.do("POST", "/orders", "k", "pen") }()
		<-entered
		var wg sync.WaitGroup
		results := make(chan *http.Response, 50)
		for i := 0; i < 49; i++ {
			wg.Add(1)
			go func() { defer wg.Done(); results <- f.do("POST", "/orders", "k", "pen") }()
		}
		if !wait {
			wg.Wait()
		} else {
			time.Sleep(50 * time.Millisecond)
		}
		close(release)
		if r := <-done; r.StatusCode != 201 {
			t.Fatalf("first: %d", r.StatusCode)
		}
		wg.Wait()
		close(results)
		for r := range results {
			if wait {
				if r.StatusCode != 201 || r.Header.Get("Idempotent-Replayed") != "true" {
					t.Fatalf("wait mode: %d", r.StatusCode)
				}
			} else if r.StatusCode != 409 || r.Header.Get("Retry-After") == "" || problemType(t, r) != "in-progress" {
				t.Fatalf("concurrent duplicate: %d Retry-After %q", r.StatusCode, r.Header.Get("Retry-After"))
			}
		}
		if f.up.total.Load() != 1 {
			t.Fatalf("wait=%v: executions %d, want 1", wait, f.up.total.Load())
		}
	}
}

func TestServerErrorsReleaseTheKey(t *testing.T) {
	for _, stripe := range []bool{false, true} {
		f := newFixture(t, idemhttp.WithStore5xx(stripe))
		fail := true
		f.up.hook = func(w http.ResponseWriter, r *http.Request) bool {
			if fail {
				w.WriteHeader(http.StatusInternalServerError)
				return true
			}
			return false
		}
		if r := f.do("POST", "/orders", "k", "pen"); r.StatusCode != 500 {
			t.Fatal(r.StatusCode)
		}
		fail = false
		r := f.do("POST", "/orders", "k", "pen")
		if stripe {
			if r.StatusCode != 500 || r.Header.Get("Idempotent-Replayed") != "true" || f.up.total.Load() != 1 {
				t.Fatalf("stripe mode: %d, executions %d", r.StatusCode, f.up.total.Load())
			}
		} else if r.StatusCode != 201 || f.up.total.Load() != 2 {
			t.Fatalf("after a 500 the retry must execute: %d, executions %d", r.StatusCode, f.up.total.Load())
		}
	}
}

func TestPanicReleasesTheKey(t *testing.T) {
	f := newFixture(t)
	boom := true
	f.up.hook = func(w http.ResponseWriter, r *http.Request) bool {
		if boom {
			boom = false
			panic("handler bug")
		}
		return false
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("panic swallowed")
			}
		}()
		f.do("POST", "/orders", "k", "pen")
	}()
	if r := f.do("POST", "/orders", "k", "pen"); r.StatusCode != 201 || f.up.total.Load() != 2 {
		t.Fatalf("retry after panic: %d, executions %d", r.StatusCode, f.up.total.Load())
	}
}

func TestLimits(t *testing.T) {
	f := newFixture(t, idemhttp.WithMaxResponseBody(1024))
	big := strings.Repeat("x", 10<<20)
	if r := f.do("POST", "/orders", "k", big); r.StatusCode != 413 || problemType(t, r) != "request-too-large" {
		t.Fatalf("10 MiB body: %d", r.StatusCode)
	}
	if f.store.calls.Load() != 0 || f.up.total.Load() != 0 {
		t.Fatal("413 touched the store or the handler")
	}
	f.up.hook = func(w http.ResponseWriter, r *http.Request) bool {
		_, _ = io.WriteString(w, strings.Repeat("y", 4096))
		return true
	}
	if r := f.do("POST", "/big", "k2", "x"); r.StatusCode != 200 || len(bodyOf(t, r)) != 4096 {
		t.Fatalf("large response not delivered: %d", r.StatusCode)
	}
	r := f.do("POST", "/big", "k2", "x")
	if r.StatusCode != 410 || r.Header.Get("Idempotent-Replayed") != "true" || problemType(t, r) != "response-not-stored" {
		t.Fatalf("replay of a large response: %d", r.StatusCode)
	}
	f.up.hook = func(w http.ResponseWriter, r *http.Request) bool {
		w.Header().Set("Content-Type", "text/event-stream") // a real stream
		_, _ = io.WriteString(w, "data: 1\n\n")
		w.(http.Flusher).Flush()
		return true
	}
	f.do("POST", "/stream", "k3", "x")
	if r := f.do("POST", "/stream", "k3", "x"); r.StatusCode != 410 {
		t.Fatalf("replay of a streamed response: %d", r.StatusCode)
	}
	if f.up.total.Load() != 2 {
		t.Fatalf("executions %d, want 2: not-stored responses must not re-execute", f.up.total.Load())
	}
}

func TestStoreDownFailsClosed(t *testing.T) {
	f := newFixture(t)
	f.store.down.Store(true)
	r := f.do("POST", "/orders", "k", "pen")
	if r.StatusCode != 503 || r.Header.Get("Retry-After") == "" || problemType(t, r) != "store-unavailable" || f.up.total.Load() != 0 {
		t.Fatalf("store down: %d, executions %d", r.StatusCode, f.up.total.Load())
	}
	f.store.down.Store(false)
	if r := f.do("POST", "/orders", "k", "pen"); r.StatusCode != 201 {
		t.Fatalf("store back: %d", r.StatusCode)
	}
}

func TestExpiry(t *testing.T) {
	f := newFixture(t, idemhttp.WithTTL(50*time.Millisecond))
	f.do("POST", "/orders", "k", "pen")
	if r := f.do("POST", "/orders", "k", "pen"); r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatal("not replayed inside the TTL")
	}
	time.Sleep(120 * time.Millisecond)
	if r := f.do("POST", "/orders", "k", "pen"); r.Header.Get("Idempotent-Replayed") != "" || f.up.total.Load() != 2 {
		t.Fatalf("after expiry: replayed=%q executions %d", r.Header.Get("Idempotent-Replayed"), f.up.total.Load())
	}
}

// TestNewRejects: New refuses every option value it cannot honour, and a
// nil store, with an error wrapping idem.ErrInvalidOption.
func TestNewRejects(t *testing.T) {
	t.Parallel()
	small, err := idemhttp.NewBudget(1 << 10)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := idemhttp.NewBudget(0); !errors.Is(err, idem.ErrInvalidOption) {
		t.Errorf("NewBudget(0): %v", err)
	}
	for name, opts := range map[string][]idemhttp.Option{
		"ttl":                     {idemhttp.WithTTL(0)},
		"lease":                   {idemhttp.WithLease(-1)},
		"wait":                    {idemhttp.WithWait(-1)},
		"methods":                 {idemhttp.WithMethods()},
		"method with a space":     {idemhttp.WithMethods("PO ST")},
		"max body":                {idemhttp.WithMaxRequestBody(0)},
		"max response":            {idemhttp.WithMaxResponseBody(0)},
		"fingerprint header":      {idemhttp.WithFingerprintHeaders(" ")},
		"scope":                   {idemhttp.WithScopeFunc(nil)},
		"docs url":                {idemhttp.WithDocsURL("")},
		"logger":                  {idemhttp.WithLogger(nil)},
		"hooks":                   {idemhttp.WithHooks(nil)},
		"store timeout":           {idemhttp.WithStoreTimeout(0)},
		"nil":                     {nil},
		"nil budget":              {idemhttp.WithBudget(nil)},
		"budget below body":       {idemhttp.WithBudget(small)},
		"nil transport":           {idemhttp.WithUpstreamTransport(nil)},
		"nil forwarded":           {idemhttp.WithForwarded(nil)},
		"body timeout 0":          {idemhttp.WithBodyTimeout(0)},
		"write timeout negative":  {idemhttp.WithClientWriteTimeout(-time.Second)},
		"buffered 0":              {idemhttp.WithMaxBufferedBytes(0)},
		"buffered below max body": {idemhttp.WithMaxRequestBody(1 << 20), idemhttp.WithMaxBufferedBytes(1 << 19)},
		"cookie name empty":       {idemhttp.WithScopeCookie(" ")},
		"cookie name with ;":      {idemhttp.WithScopeCookie("a;b")},
		"stream type bad":         {idemhttp.WithStreamContentTypes("/")},
	} {
		if _, err := idemhttp.New(dbtest.MemStore(t), opts...); !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("%s: %v, want idem.ErrInvalidOption", name, err)
		}
	}
	if _, err := idemhttp.New(nil); !errors.Is(err, idem.ErrInvalidOption) {
		t.Errorf("nil store: %v", err)
	}
}

// TestReplayHeadersOption: WithReplayHeaders replaces the allow list (an
// application header is replayed, a default one no longer is), never lets
// a per-response header through, and DefaultReplayHeaders is the list to
// extend.
func TestReplayHeadersOption(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		headers    []string
		kept, lost []string
	}{
		{"replaced", []string{"x-charge-id", "Set-Cookie", "X-Request-Id"}, []string{"X-Charge-Id"}, []string{"Location", "Content-Type", "Set-Cookie", "X-Request-Id"}},
		{"extended", append(idemhttp.DefaultReplayHeaders(), "X-Charge-Id"), []string{"X-Charge-Id", "Location", "Content-Type"}, []string{"Set-Cookie"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, idemhttp.WithReplayHeaders(tc.headers...))
			f.up.hook = func(w http.ResponseWriter, _ *http.Request) bool { w.Header().Set("X-Charge-Id", "ch_1"); return false }
			f.do("POST", "/charges", "k", "pen")
			r := f.do("POST", "/charges", "k", "pen")
			if r.Header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("not replayed: %d", r.StatusCode)
			}
			for _, h := range tc.kept {
				if r.Header.Get(h) == "" {
					t.Errorf("%s not replayed: %v", h, r.Header)
				}
			}
			for _, h := range tc.lost {
				if r.Header.Get(h) != "" {
					t.Errorf("%s replayed: %q", h, r.Header.Get(h))
				}
			}
		})
	}
	if d := idemhttp.DefaultReplayHeaders(); slices.Contains(d, "X-Charge-Id") {
		t.Fatal("DefaultReplayHeaders shares its slice with callers")
	}
}

// TestDocsURLOption: problem types link to the page WithDocsURL names.
func TestDocsURLOption(t *testing.T) {
	t.Parallel()
	f := newFixture(t, idemhttp.WithDocsURL("https://api.example.com/errors"), idemhttp.WithRequired(true))
	r := f.do("POST", "/orders", "", "pen")
	var p struct{ Type string }
	if err := json.Unmarshal([]byte(bodyOf(t, r)), &p); err != nil || r.StatusCode != 400 || p.Type != "https://api.example.com/errors#missing-key" {
		t.Fatalf("%d problem type %q (%v)", r.StatusCode, p.Type, err)
	}
}

// stuckStore never answers Reserve before its ctx ends.
type stuckStore struct{ keystore.Store }

func (stuckStore) Reserve(ctx context.Context, _ string, _ []byte, _ time.Duration) (keystore.Claim, error) {
	<-ctx.Done()
	return keystore.Claim{}, ctx.Err()
}

// TestStoreTimeoutOption: a store that does not answer fails the request
// with 503 once WithStoreTimeout has passed, and the handler does not run.
func TestStoreTimeoutOption(t *testing.T) {
	t.Parallel()
	m, err := idemhttp.New(stuckStore{dbtest.MemStore(t)}, idemhttp.WithStoreTimeout(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true }))
	r := httptest.NewRequest("POST", "/orders", strings.NewReader("x"))
	r.Header.Set("Idempotency-Key", "k")
	r.Header.Set("Authorization", "Bearer alice")
	w := httptest.NewRecorder()
	start := time.Now()
	h.ServeHTTP(w, r)
	if w.Code != 503 || ran || time.Since(start) > 5*time.Second {
		t.Fatalf("%d after %v, handler ran %v", w.Code, time.Since(start), ran)
	}
}

// memMiddleware is a Middleware with opts on a memstore closed when the
// test ends.
func memMiddleware(t testing.TB, opts ...idemhttp.Option) *idemhttp.Middleware {
	t.Helper()
	m, err := idemhttp.New(dbtest.MemStore(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
