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
// | keyed request with no principal (no Authorization, or what the scope option looks for) | 400 "no-principal", unless [WithAllowAnonymous] |
// | body over the limit (default 8 MiB) | 413, before any store I/O |
// | body not arrived within the body timeout (default 30s) | 408, connection closed, before any store I/O |
// | keyed bodies held at once over [WithMaxBufferedBytes] (or a [Budget] shared by several, [WithBudget]) | 503 "busy" + Retry-After: 1, before any store I/O |
// | new key past the principal's or the route's [Quota] (keys, stored bytes; [WithQuota]) | 429 "quota-exceeded" + Retry-After (when the oldest held key expires); key released, handler not run |
// | same key, request still running | 409 + Retry-After from recent execution times (or wait for it: WithWait) |
// | same key, different fingerprint (method, path, query, body, configured headers) | 422; the first record untouched |
// | key completed | stored status, headers and body + Idempotent-Replayed: true |
// | handler answered 2xx, 3xx or 4xx (except 408, 425, 429) | stored, replayed on retries; flushes and chunked bodies included |
// | handler answered 5xx, 408, 425 or 429, or panicked before answering | key released: a retry executes (WithStore5xx stores 5xx, as Stripe does) |
// | handler answered a storable status, then panicked (or the upstream's body broke off) | completed as "response-lost": retries get 502, never re-executed |
// | proxy: the upstream never answered (refused, reset, timed out) | 502/504, never stored in any mode; key released |
// | response larger than the limit, or a stream (text/event-stream, Hijack) | delivered once, never re-executed; a retry gets 410 problem+json "response-not-stored" |
// | client gone once the key is reserved | handler not run, key released |
// | client disconnects or times out while the handler runs | the handler's context does not end (unless [WithClientCancel]); its response is stored though it cannot be delivered, and the retry replays it |
// | lease lost, [WithHandlerTimeout] passed, or [Middleware.Abort] | the handler's context ends; its response is settled as any other (5xx releases the key) |
// | store unreachable | 503, handler not run (fail closed) |
// | store not migrated (a SQL store whose Migrate was never called; see [keystore.Check]) | 500 "store-not-migrated" naming the fix, no Retry-After, handler not run |
//
// Every answer to a keyed request carries its Idempotency-Key header back.
// Never replayed: Set-Cookie, hop-by-hop headers, Date, request ids (the
// original's is replayed as Original-Request) and rate-limit headers. Only
// headers on the replay allow list are stored (see [DefaultReplayHeaders]).
//
// Keys are scoped by principal: by default a SHA-256 of the Authorization
// header; a keyed request without one is refused, since clients without a
// principal would otherwise share one scope and see each other's responses.
// [WithScopeCookie], [WithScopeHeader] and [WithScopeFunc] choose another
// principal; [WithAllowAnonymous] restores a shared "anonymous" scope. One
// principal never receives another principal's stored response, even with
// the same key.
//
// # What happens if the process dies, or the client goes
//
//   - Before the key is reserved: nothing recorded; the retry executes.
//   - The client disconnects during a store call: the call is not cancelled
//     (it runs under context.WithoutCancel, bounded by WithStoreTimeout), so
//     no reservation is left half made; if the client is gone once the key
//     is reserved, the key is released and the handler does not run.
//   - After the reservation, while the handler runs: the key stays in
//     progress until its lease ends (retries get 409), then a retry executes.
//     The handler's effect may or may not have happened: pass the key
//     downstream (to the payment provider's own Idempotency-Key) so that a
//     repeat is absorbed there, and set the lease longer than the handler's
//     longest run.
//   - The client disconnects or times out while the handler runs: the
//     handler runs on under a context that keeps the request's values but
//     not its cancellation (the retry is expected: a handler cut off
//     mid-effect would release its key and act again on the retry); its
//     response is stored and the retry replays it.
//   - After the response is stored: retries replay it.
//
// The handler reads the parsed key ([KeyFrom]), to pass downstream, and
// the claim ([ClaimFrom]): its fencing token and whether it took over an
// expired lease.
//
// Errors are RFC 9457 problem details (application/problem+json) whose type
// links to docs/http.md.
package idemhttp
