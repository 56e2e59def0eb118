// Package idemcaddy is a Caddy v2 HTTP handler module,
// http.handlers.idempotency, that gives the routes it is placed on
// idempotency keys with the semantics of idemhttp.
package idemcaddy
