package idemhttp

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/testsupport/dbtest"
	"github.com/idem-go/idem/keystore/memstore"
)

// quotaServer is a Middleware with q over memstore, principals from the
// X-Client header, a handler that answers body (or 500 for /fail), and a
// clock the test moves.
type quotaServer struct {
	m     *Middleware
	h     http.Handler
	runs  atomic.Int32
	clock atomic.Int64 // unix nanoseconds
}

func newQuotaServer(t *testing.T, q Quota, body string, opts ...Option) *quotaServer {
	t.Helper()
	qs := &quotaServer{}
	qs.clock.Store(time.Unix(1_700_000_000, 0).UnixNano())
	now := func() time.Time { return time.Unix(0, qs.clock.Load()) }
	store, err := memstore.New(memstore.WithClock(now))
	if err != nil {
		t.Fatal(err)
	}
	opts = append([]Option{WithQuota(q), WithScopeHeader("X-Client"), WithTTL(time.Hour)}, opts...)
	if qs.m, err = New(store, opts...); err != nil {
		t.Fatal(err)
	}
	qs.m.quotas.now = now
	qs.h = qs.m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		qs.runs.Add(1)
		if r.URL.Path == "/fail" {
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(body))
	}))
	return qs
}

func (qs *quotaServer) post(client, key, path string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader("x"))
	r.Header.Set("X-Client", client)
	r.Header.Set(HeaderKey, strconv.Quote(key))
	w := httptest.NewRecorder()
	qs.h.ServeHTTP(w, r)
	return w
}

func (qs *quotaServer) advance(d time.Duration) { qs.clock.Add(int64(d)) }

func TestQuotaPrincipalKeys(t *testing.T) {
	qs := newQuotaServer(t, Quota{PrincipalKeys: 2}, "ok")
	for _, k := range []string{"a1", "a2"} {
		if w := qs.post("alice", k, "/charges"); w.Code != http.StatusCreated {
			t.Fatalf("%s: %d", k, w.Code)
		}
	}
	w := qs.post("alice", "a3", "/charges")
	if w.Code != http.StatusTooManyRequests || !strings.Contains(w.Body.String(), "quota-exceeded") || w.Header().Get("Retry-After") != "3600" {
		t.Fatalf("a third key: %d Retry-After %q %s, want 429 quota-exceeded, Retry-After 3600", w.Code, w.Header().Get("Retry-After"), w.Body)
	}
	if n := qs.runs.Load(); n != 2 {
		t.Fatalf("the handler ran %d times, want 2: a refused key must not run", n)
	}
	// A retry of a key alice holds is answered from the store.
	if w := qs.post("alice", "a1", "/charges"); w.Code != http.StatusCreated || w.Header().Get(HeaderReplayed) != "true" {
		t.Fatalf("replay at the bound: %d replayed=%q", w.Code, w.Header().Get(HeaderReplayed))
	}
	// Another principal is not held back by alice.
	if w := qs.post("bob", "b1", "/charges"); w.Code != http.StatusCreated {
		t.Fatalf("bob: %d", w.Code)
	}
	// The refused key was released: once alice's keys expire, the same
	// request runs.
	qs.advance(time.Hour + time.Second)
	if w := qs.post("alice", "a3", "/charges"); w.Code != http.StatusCreated || w.Header().Get(HeaderReplayed) != "" {
		t.Fatalf("a3 after expiry: %d replayed=%q", w.Code, w.Header().Get(HeaderReplayed))
	}
	if u := qs.m.QuotaUsage(); u.Keys != 1 || u.Principals != 1 {
		t.Fatalf("usage after expiry: %+v, want alice's one key", u)
	}
}

// A key given back (a 5xx, not stored) does not count.
func TestQuotaReleasedKeysDoNotCount(t *testing.T) {
	qs := newQuotaServer(t, Quota{PrincipalKeys: 1}, "ok")
	for i := range 3 {
		if w := qs.post("alice", fmt.Sprint("f", i), "/fail"); w.Code != http.StatusInternalServerError {
			t.Fatalf("fail %d: %d", i, w.Code)
		}
	}
	if w := qs.post("alice", "ok", "/charges"); w.Code != http.StatusCreated {
		t.Fatalf("after three released keys: %d", w.Code)
	}
	if u := qs.m.QuotaUsage(); u.Keys != 1 {
		t.Fatalf("usage %+v, want 1 key", u)
	}
}

func TestQuotaBytes(t *testing.T) {
	body := strings.Repeat("x", 700)
	qs := newQuotaServer(t, Quota{PrincipalKeys: 100, PrincipalBytes: 1000}, body)
	for _, k := range []string{"a1", "a2"} { // 0 then ~700 bytes held: both under 1000
		if w := qs.post("alice", k, "/charges"); w.Code != http.StatusCreated {
			t.Fatalf("%s: %d", k, w.Code)
		}
	}
	if w := qs.post("alice", "a3", "/charges"); w.Code != http.StatusTooManyRequests {
		t.Fatalf("past 1000 stored bytes: %d, want 429", w.Code)
	}
	if u := qs.m.QuotaUsage(); u.Bytes < 1400 || u.Bytes > 2000 {
		t.Fatalf("usage %+v: want the two stored records, about 1.4 kB", u)
	}
}

// The route's bound holds across principals; Retry-After is when the
// route's oldest key expires.
func TestQuotaRouteKeys(t *testing.T) {
	qs := newQuotaServer(t, Quota{Keys: 2}, "ok")
	qs.post("alice", "a1", "/charges")
	qs.advance(10 * time.Minute)
	qs.post("bob", "b1", "/charges")
	w := qs.post("carol", "c1", "/charges")
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "3000" {
		t.Fatalf("carol past the route's bound: %d Retry-After %q, want 429 and 3000 (alice's key ends in 50 minutes)", w.Code, w.Header().Get("Retry-After"))
	}
}

// Concurrent new keys from one principal: exactly the bound run.
func TestQuotaConcurrent(t *testing.T) {
	const bound, n = 10, 60
	qs := newQuotaServer(t, Quota{PrincipalKeys: bound}, "ok")
	var wg sync.WaitGroup
	var created, refused atomic.Int32
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch w := qs.post("alice", fmt.Sprint("k", i), "/charges"); w.Code {
			case http.StatusCreated:
				created.Add(1)
			case http.StatusTooManyRequests:
				refused.Add(1)
			default:
				t.Errorf("k%d: %d", i, w.Code)
			}
		}()
	}
	wg.Wait()
	if created.Load() != bound || refused.Load() != n-bound || qs.runs.Load() != bound {
		t.Fatalf("created %d refused %d runs %d, want %d, %d, %d", created.Load(), refused.Load(), qs.runs.Load(), bound, n-bound, bound)
	}
}

func TestQuotaOptions(t *testing.T) {
	store := dbtest.MemStore(t)
	for _, q := range []Quota{{}, {PrincipalBytes: 1 << 20}, {PrincipalKeys: -1}, {Keys: 1, Bytes: -1}} {
		if _, err := New(store, WithQuota(q)); err == nil {
			t.Errorf("WithQuota(%+v) accepted", q)
		}
	}
	_, err := New(store, WithQuota(Quota{Bytes: 1 << 20}))
	if err == nil || !strings.Contains(err.Error(), "set PrincipalKeys or Keys") {
		t.Fatalf("a quota without a key bound: %v, want an error saying to set one", err)
	}
}

// Expired keys leave the accounting's memory: a long run of keys through
// one principal does not grow it past the live ones.
func TestQuotaMemoryBounded(t *testing.T) {
	qs := newQuotaServer(t, Quota{PrincipalKeys: 4}, "ok", WithTTL(time.Minute))
	for i := range 2000 {
		if w := qs.post(fmt.Sprint("p", i%7), fmt.Sprint("k", i), "/charges"); w.Code != http.StatusCreated {
			t.Fatalf("k%d: %d", i, w.Code)
		}
		qs.advance(5 * time.Second) // 12 keys live at a time across 7 principals
	}
	q := qs.m.quotas
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.queue) > 200 || q.total.keys > 13 {
		t.Fatalf("after 2000 keys: queue %d entries, %d keys counted", len(q.queue), q.total.keys)
	}
}
