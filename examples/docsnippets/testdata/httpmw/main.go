// Mirror of the "In Go" block of docs/http.md. main mounts the handler,
// then sends one request twice with the same key: the handler runs once,
// and the second response is the stored one.
//
//docsnippets:run
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"

	_ "modernc.org/sqlite"

	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/keystore/sqlitestore"
)

func mount(ctx context.Context, chargeHandler http.Handler) error {
	// import _ "modernc.org/sqlite": the driver sqlitestore opens
	store, err := sqlitestore.Open("keys.db") // or memstore, sqlstore, redisstore
	if err != nil {
		return err
	}
	if err := store.Migrate(ctx); err != nil { // or apply store.SchemaSQL() with your migration tool
		return err
	}
	mw, err := idemhttp.New(store, idemhttp.WithRequired(true))
	if err != nil {
		return err
	}
	http.Handle("/charges", mw.Handler(chargeHandler))
	return nil
}

func main() {
	var charges atomic.Int32
	charge := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := charges.Add(1)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "charge %d\n", n)
	})
	if err := mount(context.Background(), charge); err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(http.DefaultServeMux)
	defer srv.Close()
	for range 2 {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/charges", strings.NewReader(`{"amount":5000}`))
		if err != nil {
			log.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer sk_test_1")
		req.Header.Set("Idempotency-Key", `"order-42"`)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%d %s replayed=%q: %s", resp.StatusCode, resp.Header.Get("Idempotency-Key"), resp.Header.Get("Idempotent-Replayed"), body)
	}
	if n := charges.Load(); n != 1 {
		log.Fatalf("the handler ran %d times; want 1", n)
	}
}
