package idemhttp_test

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/keystore/memstore"
)

// A payment endpoint behind the middleware: the client's retry with the same
// Idempotency-Key gets the stored response and the charge runs once.
func Example() {
	store, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	mw, err := idemhttp.New(store, idemhttp.WithRequired(true))
	if err != nil {
		log.Fatal(err)
	}
	charges := 0
	api := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		charges++
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":"ch_%d"}`, charges)
	}))
	srv := httptest.NewServer(api)
	defer srv.Close()

	for _, key := range []string{`"order-42"`, `"order-42"`, ""} {
		req, _ := http.NewRequest("POST", srv.URL+"/charges", strings.NewReader(`{"amount":5000}`))
		req.Header.Set("Authorization", "Bearer sk_test_alice") // the principal keys are scoped by
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		fmt.Println(res.StatusCode, res.Header.Get("Idempotent-Replayed"), strings.TrimSpace(string(body))[:min(len(body), 40)])
	}
	fmt.Println("charges:", charges)
	// Output:
	// 201  {"charge":"ch_1"}
	// 201 true {"charge":"ch_1"}
	// 400  {"type":"https://github.com/idem-go/idem
	// charges: 1
}

// An API authenticated by a session cookie: keys are scoped by a hash of the
// cookie, so two users who happen to send the same key never see each
// other's response, and a request with no principal is refused.
func ExampleWithScopeCookie() {
	store, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	mw, err := idemhttp.New(store, idemhttp.WithScopeCookie("session"))
	if err != nil {
		log.Fatal(err)
	}
	api := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := r.Cookie("session")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "order for %s", c.Value)
	}))
	for _, session := range []string{"alice", "bob", "alice", ""} {
		req := httptest.NewRequest("POST", "/orders", strings.NewReader(`{"sku":"pen"}`))
		req.Header.Set("Idempotency-Key", "cart-1")
		if session != "" {
			req.AddCookie(&http.Cookie{Name: "session", Value: session})
		}
		w := httptest.NewRecorder()
		api.ServeHTTP(w, req)
		body := w.Body.String()
		if w.Code == http.StatusBadRequest {
			body = body[strings.Index(body, "#")+1 : strings.Index(body, `","title`)]
		}
		fmt.Println(w.Code, w.Header().Get("Idempotent-Replayed"), body)
	}
	// Output:
	// 201  order for alice
	// 201  order for bob
	// 201 true order for alice
	// 400  no-principal
}

// A response header the client needs on a replay too (the charge's id) is
// added to the default allow list; Set-Cookie is never replayed, whatever
// the list says.
func ExampleWithReplayHeaders() {
	store, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	mw, err := idemhttp.New(store, idemhttp.WithReplayHeaders(append(idemhttp.DefaultReplayHeaders(), "X-Charge-Id", "Set-Cookie")...))
	if err != nil {
		log.Fatal(err)
	}
	api := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Charge-Id", "ch_1")
		w.Header().Set("Set-Cookie", "session=s1")
		w.WriteHeader(http.StatusCreated)
	}))
	for range 2 {
		req := httptest.NewRequest("POST", "/charges", strings.NewReader(`{"amount":5000}`))
		req.Header.Set("Authorization", "Bearer sk_test_alice")
		req.Header.Set("Idempotency-Key", "order-42")
		w := httptest.NewRecorder()
		api.ServeHTTP(w, req)
		fmt.Printf("%d replayed=%q charge=%q cookie=%q\n", w.Code, w.Header().Get("Idempotent-Replayed"), w.Header().Get("X-Charge-Id"), w.Header().Get("Set-Cookie"))
	}
	// Output:
	// 201 replayed="" charge="ch_1" cookie="session=s1"
	// 201 replayed="true" charge="ch_1" cookie=""
}

// A server set up as production servers are: every connection bounded by
// net/http's timeouts. Its ReadTimeout (10 s) is tighter than the
// middleware's body timeout (30 s by default), so it bounds keyed bodies as
// well, and the middleware sets no read deadline of its own; a longer
// ReadTimeout would leave keyed bodies to the body timeout.
func ExampleWithBodyTimeout() {
	store, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	srv := &http.Server{
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	mw, err := idemhttp.New(store, idemhttp.WithBodyTimeout(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	srv.Handler = mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	for range 2 {
		req, _ := http.NewRequest("POST", "http://"+ln.Addr().String()+"/orders", strings.NewReader(`{"sku":"pen"}`))
		req.Header.Set("Authorization", "Bearer alice")
		req.Header.Set("Idempotency-Key", `"order-7"`)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		res.Body.Close()
		fmt.Printf("%d replayed=%q\n", res.StatusCode, res.Header.Get("Idempotent-Replayed"))
	}
	// Output:
	// 201 replayed=""
	// 201 replayed="true"
}
