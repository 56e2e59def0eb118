package idemhttp_test

import (
	"fmt"
	"log"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/keystore/memstore"
)

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
	mw, err := idemhttp.New(store, idemhttp.WithBodyTimeout(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{
		Handler: mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusCreated)
		})),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
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
