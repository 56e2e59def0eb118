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

// One client may hold two keys on this route: a third new key is refused
// with 429 before the handler runs, while a retry of a key it holds is
// still replayed. Another client is not held back.
func ExampleWithQuota() {
	store, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	mw, err := idemhttp.New(store, idemhttp.WithQuota(idemhttp.Quota{PrincipalKeys: 2, Keys: 10_000}))
	if err != nil {
		log.Fatal(err)
	}
	api := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	post := func(principal, key string) {
		r := httptest.NewRequest("POST", "/charges", strings.NewReader(`{"amount":5000}`))
		r.Header.Set("Authorization", "Bearer "+principal)
		r.Header.Set("Idempotency-Key", `"`+key+`"`)
		w := httptest.NewRecorder()
		api.ServeHTTP(w, r)
		fmt.Println(principal, key, w.Code, w.Header().Get("Idempotent-Replayed") == "true")
	}
	post("alice", "k1")
	post("alice", "k2")
	post("alice", "k3") // a third key: refused
	post("alice", "k1") // a retry: replayed
	post("bob", "k1")
	// Output:
	// alice k1 201 false
	// alice k2 201 false
	// alice k3 429 false
	// alice k1 201 true
	// bob k1 201 false
}
