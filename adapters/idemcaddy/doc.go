// Package idemcaddy is a Caddy v2 HTTP handler module,
// http.handlers.idempotency, that gives the routes it is placed on
// idempotency keys with the semantics of idemhttp: the first request with
// a key runs and its response is stored; a retry with the same key gets
// the stored response with Idempotent-Replayed: true; the same key with
// another request is 422; a key still in progress is 409 (or waits); keys
// are scoped by the principal; a store that does not answer is 503, never
// a second execution.
//
// Build Caddy with it:
//
//	xcaddy build --with github.com/idem-go/idem/adapters/idemcaddy@v0.1.0
//
// and put it before reverse_proxy (the directive orders itself there):
//
//	example.com {
//		idempotency /v1/* {
//			store redis://127.0.0.1:6379/0
//			lease 30s
//		}
//		reverse_proxy 127.0.0.1:9000
//	}
//
// Each handler is one route: Caddy's matchers and route blocks choose
// which requests it sees, and each can have its own settings. The store is
// named by the URLs `idem serve --store` takes (package storeurl); handlers
// naming the same URL share one store, across config reloads too, so a
// reload neither drops the keys in flight nor empties a memory store.
//
// docs/caddy.md has every subdirective, the metrics, and what a store
// outage and a reload do.
package idemcaddy
