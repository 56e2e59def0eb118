package idemhttp_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/internal/testsupport/dbtest"
)

// routeHooks records the routes reported to idemhttp.RouteHooks.
type routeHooks struct {
	mu     sync.Mutex
	routes []string
}

func (h *routeHooks) Request(idemhttp.Outcome, time.Duration) { panic("Request called on RouteHooks") }

func (h *routeHooks) RequestRoute(route string, _ idemhttp.Outcome, _ time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.routes = append(h.routes, route)
}

func TestRoute(t *testing.T) {
	t.Parallel()
	if _, err := idemhttp.New(dbtest.MemStore(t), idemhttp.WithRoute(" ")); err == nil {
		t.Fatal("an empty route name was accepted")
	}
	h := &routeHooks{}
	s := dbtest.MemStore(t)
	named, err := idemhttp.New(s, idemhttp.WithHooks(h), idemhttp.WithRoute("payments"))
	if err != nil {
		t.Fatal(err)
	}
	unnamed, err := idemhttp.New(s, idemhttp.WithHooks(h))
	if err != nil {
		t.Fatal(err)
	}
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	mux := http.NewServeMux()
	mux.Handle("POST /orders/{id}", unnamed.Handler(ok))
	mux.Handle("POST /pay/{id}", named.Handler(ok))
	send := func(h http.Handler, target string) {
		req := httptest.NewRequest(http.MethodPost, target, strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", target)
		req.Header.Set("Authorization", "Bearer a")
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	send(mux, "/orders/7")
	send(mux, "/pay/7")
	send(unnamed.Handler(ok), "/raw/7")
	want := []string{"POST /orders/{id}", "payments", idemhttp.DefaultRoute}
	if strings.Join(h.routes, "|") != strings.Join(want, "|") {
		t.Fatalf("routes %q, want %q", h.routes, want)
	}
}
