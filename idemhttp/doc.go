// Package idemhttp implements the Idempotency-Key HTTP header
// (draft-ietf-httpapi-idempotency-key-header) as net/http middleware and as a
// reverse proxy, on any [keystore.Store].
//
// A client sends a POST with "Idempotency-Key: <key>". The first request runs
// the handler and its response (status, allow-listed headers, body) is
// stored under the key. A retry with the same key gets the stored response,
// marked "Idempotent-Replayed: true", and the handler does not run again.
//
// | Situation | Response |
// |---|---|
// | method not configured (default: only POST and PATCH use keys) | passed through, no store I/O |
// | key required (WithRequired) and missing | 400 problem+json |
// | key invalid: not a Structured Field String (or, leniently, a bare token), empty, over 255 characters, control or non-ASCII characters, header repeated | 400 |
// | body over the limit (default 8 MiB) | 413, before any store I/O |
// | same key, request still running | 409 + Retry-After (or wait for it: WithWait) |
// | same key, different fingerprint (method, path, query, body, configured headers) | 422; the first record untouched |
// | key completed | stored status, headers and body + Idempotent-Replayed: true |
// | handler answered 2xx, 3xx or 4xx | stored, replayed on retries |
// | handler answered 5xx, panicked, or the upstream was unreachable | key released: a retry executes (WithStore5xx stores 5xx, as Stripe does) |
// | response larger than the limit, or streamed (Flush, Hijack) | delivered once, never re-executed; a retry gets 410 problem+json "response-not-stored" |
// | store unreachable | 503, handler not run (fail closed) |
//
// Never replayed: Set-Cookie, hop-by-hop headers, Date, request ids and
// rate-limit headers. Only headers on the replay allow list are stored (see
// [DefaultReplayHeaders]).
//
// Keys are scoped by principal: by default a SHA-256 of the Authorization
// header (requests without one share the "anonymous" scope), or a header or
// function of your choice ([WithScopeHeader], [WithScopeFunc]). One principal
// never receives another principal's stored response, even with the same
// key.
//
// # What happens if the process dies
//
//   - Before the key is reserved: nothing recorded; the retry executes.
//   - After the reservation, while the handler runs: the key stays in
//     progress until its lease ends (retries get 409), then a retry executes.
//     The handler's effect may or may not have happened: pass the key
//     downstream (to the payment provider's own Idempotency-Key) so that a
//     repeat is absorbed there, and set the lease longer than the handler's
//     longest run.
//   - After the response is stored: retries replay it.
//
// Errors are RFC 9457 problem details (application/problem+json) whose type
// links to docs/http.md.
package idemhttp
