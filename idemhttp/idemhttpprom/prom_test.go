package idemhttpprom_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/idemhttp/idemhttpprom"
	"github.com/idem-go/idem/keystore/memstore"
)

// newHooks registers Hooks in a new registry.
func newHooks(t *testing.T) (*prometheus.Registry, *idemhttpprom.Hooks) {
	t.Helper()
	reg := prometheus.NewRegistry()
	h, err := idemhttpprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	return reg, h
}

// checkRequests compares idem_http_requests_total in reg with series, its
// samples one a line.
func checkRequests(t *testing.T, reg *prometheus.Registry, series string) {
	t.Helper()
	want := `
# HELP idem_http_requests_total Requests seen by the idempotency middleware, by outcome and route.
# TYPE idem_http_requests_total counter
` + strings.TrimPrefix(series, "\n")
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "idem_http_requests_total"); err != nil {
		t.Fatal(err)
	}
}

func TestHooks(t *testing.T) {
	reg, h := newHooks(t)
	h.Request(idemhttp.OutcomeReplayed, time.Millisecond)
	h.RequestRoute("POST /orders", idemhttp.OutcomeReplayed, time.Millisecond)
	h.RequestRoute("POST /orders", idemhttp.OutcomeExecuted, time.Second)
	checkRequests(t, reg, `
idem_http_requests_total{outcome="executed",route="POST /orders"} 1
idem_http_requests_total{outcome="replayed",route="POST /orders"} 1
idem_http_requests_total{outcome="replayed",route="default"} 1
`)
	if n := testutil.CollectAndCount(reg, "idem_http_request_duration_seconds"); n != 2 {
		t.Fatalf("%d duration series, want 2", n)
	}
	if _, err := idemhttpprom.New(reg); err == nil {
		t.Fatal("registering twice succeeded")
	}
	if _, err := idemhttpprom.New(prometheus.NewRegistry(), idemhttpprom.WithConstLabels(prometheus.Labels{"route": "x"})); err == nil {
		t.Fatal("a constant route label was accepted")
	}
}

// The middleware reports each request's route: WithRoute's name, else the
// ServeMux pattern that routed it, else "default"; never the raw path.
func TestRouteLabel(t *testing.T) {
	reg, h := newHooks(t)
	store, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) })
	named, err := idemhttp.New(store, idemhttp.WithHooks(h), idemhttp.WithRoute("payments"))
	if err != nil {
		t.Fatal(err)
	}
	unnamed, err := idemhttp.New(store, idemhttp.WithHooks(h))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders/{id}", unnamed.Handler(ok))
	mux.Handle("POST /pay", named.Handler(ok))
	for i, target := range []string{"/orders/1", "/orders/2", "/pay", "/unrouted"} {
		req := httptest.NewRequest(http.MethodPost, target, strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", fmt.Sprint("k", i))
		req.Header.Set("Authorization", "Bearer a")
		if target == "/unrouted" {
			unnamed.Handler(ok).ServeHTTP(httptest.NewRecorder(), req)
			continue
		}
		mux.ServeHTTP(httptest.NewRecorder(), req)
	}
	checkRequests(t, reg, `
idem_http_requests_total{outcome="executed",route="POST /orders/{id}"} 2
idem_http_requests_total{outcome="executed",route="default"} 1
idem_http_requests_total{outcome="executed",route="payments"} 1
`)
}

// Hooks for a proxy, with a label that names it in a shared registry.
func ExampleNew() {
	reg := prometheus.NewRegistry()
	h, err := idemhttpprom.New(reg, idemhttpprom.WithConstLabels(prometheus.Labels{"proxy": "payments"}))
	if err != nil {
		fmt.Println(err)
		return
	}
	// Pass h to idemhttp.New or idemhttp.NewProxy with idemhttp.WithHooks(h).
	h.Request(idemhttp.OutcomeReplayed, time.Millisecond)
	n, err := testutil.GatherAndCount(reg, "idem_http_requests_total")
	fmt.Println(n, err)
	// Output: 1 <nil>
}
