// Package idemgrpc applies idempotency keys to unary gRPC calls, on any
// [keystore.Store]: the gRPC counterpart of idemhttp, for the duplicates
// that grpc-go's retry and hedging policies, service meshes and
// application retries produce.
//
// A client sends the key in the "idempotency-key" metadata entry
// ([UnaryClientInterceptor] stamps one per logical call, kept across
// grpc-go's retries; [WithKey] sets the caller's own). The server's
// [Interceptor.Unary] reserves (principal, key) in the store, runs the
// handler and stores its response message, status (with details) and the
// allow-listed header and trailer metadata; a retry with the same key gets
// them back with "idempotent-replayed: true", and the handler does not run
// again.
//
// Every status idemgrpc returns itself carries a google.rpc.ErrorInfo
// detail with Domain [ErrorDomain] and one of the Reason constants.
//
// | Situation | Answer |
// |---|---|
// | method not configured (WithMethods), no key and not WithRequired, or a streaming call | passed through, no store I/O |
// | WithRequired and no key | InvalidArgument MISSING_KEY |
// | key invalid (the HTTP header's rules: sf-string or bare token, 1-255 chars) or repeated | InvalidArgument INVALID_KEY |
// | no principal (default: no authorization metadata) | Unauthenticated NO_PRINCIPAL, unless WithAllowAnonymous |
// | scope function failed | InvalidArgument INVALID_SCOPE |
// | store unreachable | Unavailable STORE_UNAVAILABLE, handler not run |
// | store not migrated (a SQL store whose Migrate was never called; see keystore.Check) | FailedPrecondition STORE_NOT_MIGRATED naming the fix, handler not run; not retried by clients |
// | same key, another method or request message | FailedPrecondition KEY_REUSED; the first record untouched |
// | same key, call still running | Unavailable IN_PROGRESS + trailer grpc-retry-pushback-ms + RetryInfo (or wait: WithWait) |
// | key completed | the stored message or status, metadata, idempotent-replayed: true |
// | handler returned OK or a stored code | stored and replayed |
// | handler returned a release code ([DefaultReleaseCodes]) or panicked | key released: a retry executes |
// | client gone after the reservation, before the handler | key released, handler not run |
// | client cancels, or its deadline passes, while the handler runs | the handler's context does not end (unless [WithClientCancel]); its answer is stored and the client's retry gets the replay |
// | lease lost, [WithHandlerTimeout] passed, or [Interceptor.Abort] | the handler's context ends; its answer is settled as any other (a release code releases the key) |
// | response larger than WithMaxResponseSize or the store's limit | delivered once; replays get FailedPrecondition RESPONSE_NOT_STORED |
//
// Handler codes, by default ([WithReleaseCodes] changes the list):
//
// | Released (the call may execute again) | Stored (replayed) |
// |---|---|
// | Canceled, DeadlineExceeded, Aborted, ResourceExhausted, Unavailable: the handler says it did not act | OK, InvalidArgument, NotFound, AlreadyExists, PermissionDenied, Unauthenticated, FailedPrecondition, OutOfRange |
// | Unknown (a plain error), Internal, Unimplemented, DataLoss: what the HTTP side releases as 5xx | |
//
// A handler that has acted must not then answer with a release code: a
// handler that charged the card and then saw its context end should return
// the charge, not ctx.Err().
//
// Why Unavailable for a call in progress: grpc-go's retry policy honours
// grpc-retry-pushback-ms only for codes in its retryableStatusCodes, and
// UNAVAILABLE is the one every policy lists; its meaning ("retry this call,
// later") is what the client should do, since the retry with the same key
// gets the replay. Aborted asks for a retry of a larger sequence and is
// rarely retryable by policy. Why FailedPrecondition for a reused key: the
// request is valid on its own and fails only because of stored state (the
// key's earlier use), and no retry policy retries it.
//
// Observing: [WithHooks] reports each call's [Outcome] and duration, as
// idemhttp.WithHooks does for HTTP requests, in idemhttp's outcome
// vocabulary; [WithLogger] receives what the client
// cannot be told (a response that could not be stored, a failed release);
// [WithTracer] makes each keyed call a span.
//
// The handler's context keeps the call's values (metadata, peer, auth
// info) but not its cancellation or deadline: the retry is expected, and a
// handler cut off mid-effect would release its key and act again on the
// retry. [KeyFrom] and [ClaimFrom] give the handler the parsed key (to pass
// downstream) and the claim (its fencing token, and whether it took over an
// expired lease).
//
// Principals: by default a SHA-256 of the call's authorization metadata;
// [WithScopeTLS] uses the verified client certificate, [WithScopeFunc]
// what an authentication interceptor found. One principal never receives
// another's stored response.
//
// # What happens if the process dies, or the client goes
//
//   - Before the reservation: nothing recorded; the retry executes.
//   - After the reservation, while the handler runs: renewals stop with the
//     process; the key stays in progress until its lease (from the last
//     renewal) ends (retries get IN_PROGRESS), then a retry
//     executes. Pass the key downstream so that a repeat is absorbed there.
//   - After the response is stored: retries replay it.
//   - The client cancels or its deadline passes while the handler runs: the
//     handler's context does not end, so it completes its effect; its
//     answer is stored (store calls do not end with the client's context
//     either), and the client's retry gets the replay.
//   - The server shuts down: grpc.Server.GracefulStop waits for handlers;
//     if they outlast the grace period, [Interceptor.Abort] ends their
//     contexts, so that they answer and their keys are settled before
//     Stop.
//
// Lease keep-alive: with a store that renews leases (keystore.Extender),
// the lease is renewed every third of its length while the handler runs, so
// a slow handler does not run twice; if the lease is lost anyway (released
// by an operator, or not renewed before it ended), the handler's context is
// cancelled with a cause wrapping keystore.ErrLeaseLost. With a store that
// cannot renew, the handler's context ends when its lease does; a handler
// that ignores that and runs on may run twice, and its late response is not
// stored (ErrLeaseLost): set the lease ([WithLease]) above the handler's
// longest run.
package idemgrpc
