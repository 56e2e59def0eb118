package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the driver sqlitestore opens

	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/sqlitestore"
)

func main() {
	ctx := context.Background()
	store, err := sqlitestore.Open("keys.db")
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil { // or apply store.SchemaSQL() with your migration tool
		log.Fatal(err)
	}
	// Readiness: fail at start-up, not on every request, if the store
	// does not answer or was not migrated (keystore.ErrNotMigrated).
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = keystore.Check(cctx, store)
	cancel()
	if err != nil {
		log.Fatal(err)
	}
	mw, err := idemhttp.New(store,
		idemhttp.WithRoute("POST /charges"),      // the route label of the metrics
		idemhttp.WithHandlerTimeout(time.Minute)) // optional: bound a handler that could hang
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /charges", mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, _ := idemhttp.KeyFrom(r.Context())     // "order-42", unquoted: the provider's own idempotency key
		claim, _ := idemhttp.ClaimFrom(r.Context()) // claim.Token fences writes; claim.Takeover: an earlier holder died
		// r.Context() does not end when the client hangs up: the charge
		// completes, is stored, and the client's retry replays it.
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "charged under key %s (takeover %v)\n", key, claim.Takeover)
	})))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()

	req, err := http.NewRequest(http.MethodPost, "http://"+lis.Addr().String()+"/charges", strings.NewReader(`{"amount":5000}`))
	if err != nil {
		log.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer sk_test_1")
	req.Header.Set("Idempotency-Key", `"order-42"`)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	res.Body.Close()
	fmt.Println(res.Status)

	// Shutdown (on SIGTERM in a real server): let the handlers in flight
	// finish; past the grace period, end their contexts with Abort and
	// give them a moment to answer, so that their keys are settled.
	grace, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := srv.Shutdown(grace); err != nil {
		mw.Abort()
		last, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(last)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}
