package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Issue 31 items 2-4 through --config: key-from, fingerprint and store-4xx
// become the route's idemhttp options.
func TestConfigEventRoutes(t *testing.T) {
	t.Parallel()
	routes, err := parseConfig("f.yaml", []byte(`
routes:
  - pattern: POST /hooks/github
    key-from: {header: X-GitHub-Delivery}
    scope: {anonymous: true}
  - pattern: POST /events
    key-from: {cloudevents: true}
    scope: {anonymous: true}
  - pattern: POST /v1/payments
    fingerprint: json
    store-4xx: false
  - pattern: POST /v1/transfers
    key-from: {json: transfer.id}
    fingerprint-fields: [amount, currency]
`))
	if err != nil {
		t.Fatal(err)
	}
	var execs atomic.Int32
	status := atomic.Int32{}
	status.Store(http.StatusCreated)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		execs.Add(1)
		w.WriteHeader(int(status.Load()))
	}))
	defer up.Close()
	target, _ := url.Parse(up.URL)
	f := serveFlags{ttl: time.Hour, lease: 10 * time.Second, methods: "POST", maxBody: 1 << 20, maxResponse: 1 << 20, maxBuffered: 8 << 20,
		bodyTimeout: 5 * time.Second, writeTimeout: 5 * time.Second, storeTimeout: 5 * time.Second}
	_, ps := buildPolicies(t, f, target, routes)
	send := func(path, body string, hdr ...string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", path, strings.NewReader(body))
		r.Header.Set("Authorization", "Bearer a")
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Set(hdr[i], hdr[i+1])
		}
		w := httptest.NewRecorder()
		ps.handler(r).ServeHTTP(w, r)
		return w
	}
	replayed := func(w *httptest.ResponseRecorder) bool { return w.Header().Get("Idempotent-Replayed") == "true" }
	step := func(name string, w *httptest.ResponseRecorder, status int, replay bool, wantExecs int32) {
		t.Helper()
		if w.Code != status || replayed(w) != replay || execs.Load() != wantExecs {
			t.Fatalf("%s: %d replayed=%v execs=%d %s; want %d replayed=%v execs=%d", name, w.Code, replayed(w), execs.Load(), w.Body, status, replay, wantExecs)
		}
	}

	step("github delivery", send("/hooks/github", "{}", "X-GitHub-Delivery", "d-1"), 201, false, 1)
	step("github redelivery", send("/hooks/github", "{}", "X-GitHub-Delivery", "d-1"), 201, true, 1)
	if w := send("/hooks/github", "{}"); w.Code != 400 || !strings.Contains(w.Body.String(), "X-Github-Delivery") {
		t.Fatalf("github without delivery id: %d %s (key-from makes the key required)", w.Code, w.Body)
	}
	ce := []string{"ce-id", "e-1", "ce-source", "/orders", "ce-specversion", "1.0", "ce-type", "t"}
	step("cloudevent", send("/events", "{}", ce...), 201, false, 2)
	step("cloudevent again", send("/events", "{}", ce...), 201, true, 2)
	step("same id, other source", send("/events", "{}", "ce-id", "e-1", "ce-source", "/invoices"), 201, false, 3)

	step("payment", send("/v1/payments", `{"amount":100,"currency":"eur"}`, "Idempotency-Key", "p-1"), 201, false, 4)
	step("payment re-encoded", send("/v1/payments", "{ \"currency\" : \"\\u0065ur\",\n \"amount\" : 1E2 }", "Idempotency-Key", "p-1"), 201, true, 4)
	step("payment changed", send("/v1/payments", `{"amount":101,"currency":"eur"}`, "Idempotency-Key", "p-1"), 422, false, 4)
	status.Store(http.StatusNotFound)
	step("payment 404", send("/v1/payments", `{}`, "Idempotency-Key", "p-2"), 404, false, 5)
	step("payment 404 retried (store-4xx: false)", send("/v1/payments", `{}`, "Idempotency-Key", "p-2"), 404, false, 6)
	step("transfer 404 stored (the default)", send("/v1/transfers", `{"transfer":{"id":"t-1"},"amount":5,"currency":"usd","at":1}`), 404, false, 7)
	step("transfer 404 replayed, other unselected field", send("/v1/transfers", `{"transfer":{"id":"t-1"},"amount":5,"currency":"usd","at":2}`), 404, true, 7)
	step("transfer, other amount", send("/v1/transfers", `{"transfer":{"id":"t-1"},"amount":6,"currency":"usd","at":2}`), 422, false, 7)
}
