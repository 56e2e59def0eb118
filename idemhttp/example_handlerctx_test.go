package idemhttp_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/keystore/memstore"
)

// The handler reads the client's key, unquoted, to pass it to its payment
// provider, and the claim's fencing token, to fence its writes.
func ExampleKeyFrom() {
	store, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	mw, err := idemhttp.New(store)
	if err != nil {
		log.Fatal(err)
	}
	api := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, _ := idemhttp.KeyFrom(r.Context())
		claim, _ := idemhttp.ClaimFrom(r.Context())
		// provider.Charge(r.Context(), amount, provider.IdempotencyKey(key)):
		// r.Context() does not end when the client hangs up.
		fmt.Printf("key %s, token > 0: %v, takeover: %v\n", key, claim.Token > 0, claim.Takeover)
		w.WriteHeader(http.StatusCreated)
	}))

	req := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader(`{"amount":5000}`))
	req.Header.Set("Authorization", "Bearer sk_test_alice")
	req.Header.Set("Idempotency-Key", `"order-42"`) // the Structured Field String form
	rec := httptest.NewRecorder()
	api.ServeHTTP(rec, req)
	fmt.Println(rec.Code)
	// Output:
	// key order-42, token > 0: true, takeover: false
	// 201
}

// A handler's claim tells it whether an earlier holder of the key died
// mid-request (Takeover): that holder may have acted, so look before acting
// again, for instance by asking the provider for the key's charge.
func ExampleClaimFrom() {
	store, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	mw, err := idemhttp.New(store)
	if err != nil {
		log.Fatal(err)
	}
	api := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		claim, ok := idemhttp.ClaimFrom(r.Context())
		if ok && claim.Takeover {
			fmt.Println("an earlier attempt may have charged: look it up first")
		}
		fmt.Println("fencing token issued:", claim.Token > 0) // pass claim.Token to writes that fence stale holders
	}))
	req := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer sk_test_alice")
	req.Header.Set("Idempotency-Key", "order-43")
	api.ServeHTTP(httptest.NewRecorder(), req)
	_, inHandler := idemhttp.ClaimFrom(req.Context())
	fmt.Println("outside the handler:", inHandler)
	// Output:
	// fencing token issued: true
	// outside the handler: false
}
