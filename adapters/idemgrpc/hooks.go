package idemgrpc

import "time"

// Hooks observes the interceptor without tying it to a metrics library, as
// idemhttp.Hooks observes the HTTP middleware: one call per unary call
// that the interceptor handled.
type Hooks interface {
	// Call is called once per unary call with its outcome and the time the
	// interceptor spent, handler included. It runs on the call's goroutine:
	// keep it short.
	Call(o Outcome, d time.Duration)
}

// Outcome is what the interceptor did with one call. The names are
// idemhttp's outcomes where the two mean the same.
type Outcome string

// The outcomes reported to [Hooks].
const (
	OutcomePassThrough Outcome = "pass_through" // method not configured, or no key and not required
	OutcomeExecuted    Outcome = "executed"     // handler ran, response stored
	OutcomeReleased    Outcome = "released"     // handler ran, answered a release code or panicked: key released
	OutcomeNotStored   Outcome = "not_stored"   // handler ran, response too large to keep
	OutcomeReplayed    Outcome = "replayed"     // the stored response was returned
	OutcomeInProgress  Outcome = "in_progress"  // Unavailable IN_PROGRESS
	OutcomeMismatch    Outcome = "mismatch"     // FailedPrecondition KEY_REUSED
	OutcomeBadRequest  Outcome = "bad_request"  // missing or invalid key, no principal, bad scope, request not protobuf
	OutcomeStoreError  Outcome = "store_error"  // the store failed: not executed, or executed and not recorded
	OutcomeLeaseLost   Outcome = "lease_lost"   // handler outlived its lease; response not stored
	OutcomeClientGone  Outcome = "client_gone"  // the client left before the handler ran: released
)

// WithHooks installs an observer of every call's outcome.
func WithHooks(h Hooks) Option {
	return setIf(h != nil, invalid("nil hooks"), func(c *config) { c.hooks = h })
}
