package idemgrpc

import (
	"time"

	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/internal/option"
)

// Hooks observes the interceptor without tying it to a metrics library, as
// idemhttp.Hooks observes the HTTP middleware: one call per unary call
// that the interceptor handled.
type Hooks interface {
	// Call is called once per unary call with its outcome and the time the
	// interceptor spent, handler included. It runs on the call's goroutine:
	// keep it short.
	Call(o Outcome, d time.Duration)
}

// Outcome is what the interceptor did with one call. It is idemhttp's
// Outcome, so that one vocabulary (and one dashboard) covers HTTP requests
// and gRPC calls; the interceptor reports these of its constants:
//
//   - idemhttp.OutcomePassThrough: method not configured, or no key and not
//     required (no store I/O);
//   - idemhttp.OutcomeExecuted: the handler ran, its response is stored;
//   - idemhttp.OutcomeReleased: the handler answered a release code or
//     panicked, the key is released;
//   - idemhttp.OutcomeNotStored: the handler ran, its response was too large
//     to keep;
//   - idemhttp.OutcomeReplayed: the stored response was returned;
//   - idemhttp.OutcomeInProgress: Unavailable IN_PROGRESS;
//   - idemhttp.OutcomeMismatch: FailedPrecondition KEY_REUSED;
//   - idemhttp.OutcomeBadRequest: a missing or invalid key, no principal, a
//     failed scope function, a request that is not protobuf;
//   - idemhttp.OutcomeStoreError: the store failed (not executed, or
//     executed and not recorded), or a stored record cannot be replayed;
//   - idemhttp.OutcomeLeaseLost: the handler outlived its lease, its
//     response is not stored;
//   - idemhttp.OutcomeClientGone: the client left before the handler ran,
//     the key is released.
type Outcome = idemhttp.Outcome

// WithHooks installs an observer of every call's outcome.
func WithHooks(h Hooks) Option {
	return option.Check("idemgrpc", h != nil, func(c *config) { c.hooks = h }, "nil hooks")
}
