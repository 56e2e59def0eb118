package idemcaddy_test

import (
	"encoding/json"
	"fmt"
	"log"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/idem-go/idem/adapters/idemcaddy"
)

// A Caddyfile block becomes the handler's JSON config; Validate checks it
// with the rules of idem serve's --config, as Caddy does when it loads it.
func ExampleHandler_UnmarshalCaddyfile() {
	toks, err := caddyfile.Tokenize([]byte(`idempotency redis://127.0.0.1:6379/0 {
		key_from header X-GitHub-Delivery
		fingerprint json
		store_4xx false
		route github
	}`), "Caddyfile")
	if err != nil {
		log.Fatal(err)
	}
	var h idemcaddy.Handler
	if err := h.UnmarshalCaddyfile(caddyfile.NewDispenser(toks)); err != nil {
		log.Fatal(err)
	}
	if err := h.Validate(); err != nil {
		log.Fatal(err)
	}
	js, err := json.Marshal(h)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(js))

	bad := idemcaddy.Handler{Fingerprint: "canonical"}
	fmt.Println(bad.Validate())
	// Output:
	// {"store":"redis://127.0.0.1:6379/0","key_from":{"header":"X-GitHub-Delivery"},"fingerprint":"json","store_4xx":false,"route":"github"}
	// idempotency: fingerprint: "canonical": want raw, json or fields
}
