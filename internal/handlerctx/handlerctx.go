// Package handlerctx derives the context a keyed request's handler runs
// under, for idemhttp (middleware and proxy) and idemgrpc: one rule for
// both, and the key and claim the handler reads from it.
//
// The rule (the retry is expected): the handler's context keeps the
// request's values but not its cancellation, so a client that hangs up or
// times out does not cut the effect off half-way, and its retry with the
// same key replays the response that was recorded. The context ends
// instead when the lease is lost (a store that renews leases: see
// keystore.KeepAlive; one that cannot: when the lease ends), when the
// handler timeout passes, when the server aborts, or once the handler has
// returned. An opt-out keeps the request's cancellation as well.
package handlerctx

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idem-go/idem/keystore"
)

// Config says when a handler's context ends besides the lease.
type Config struct {
	// Timeout bounds the handler's run (0: no bound).
	Timeout time.Duration
	// Abort ends every handler context when it ends (nil: never).
	Abort context.Context
	// ClientCancel keeps the request's cancellation: the handler's
	// context also ends when the client disconnects or its deadline
	// passes, as net/http and grpc-go do.
	ClientCancel bool
}

// ErrAborted is the cause (context.Cause) of a handler context ended by the
// server's Abort.
var ErrAborted = errors.New("the server aborted the request's handler")

// ErrLeaseEnded is the cause of a handler context ended because the lease,
// on a store that does not renew leases, ended. It wraps both
// keystore.ErrLeaseLost and context.DeadlineExceeded (the context's Err):
// net/http's Transport fails with the cause, and a proxy answers 504 to it.
var ErrLeaseEnded = fmt.Errorf("%w: the lease ended (the store does not renew leases): %w", keystore.ErrLeaseLost, context.DeadlineExceeded)

// TimeoutError is the cause of a handler context ended by the handler
// timeout. It wraps context.DeadlineExceeded, as the context's Err is.
type TimeoutError struct{ Timeout time.Duration }

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("the handler ran longer than its timeout %v", e.Timeout)
}

// Unwrap returns context.DeadlineExceeded.
func (e *TimeoutError) Unwrap() error { return context.DeadlineExceeded }

// Start returns the context of a handler that acts on claim, an Acquired
// claim on the client's key of lease length lease in s, derived from req
// (the request's context), and stop, which the caller calls once the
// handler has returned or panicked, before Complete or Release. stop ends
// the renewals and the context and returns the claim with the Expires of
// the last renewal, and nil or the error (wrapping keystore.ErrLeaseLost)
// with which the lease was lost; calling it again returns the same. The
// context carries key and claim for [Key] and [Claim].
func Start(req context.Context, s keystore.Store, key string, claim keystore.Claim, lease time.Duration, cfg Config) (context.Context, func() (keystore.Claim, error)) {
	parent := req
	if !cfg.ClientCancel {
		parent = context.WithoutCancel(req)
	}
	parent = context.WithValue(parent, valuesKey{}, values{key: key, claim: claim})
	renews := keystore.CanExtend(s) && lease > 0
	// Deadlines (the lease of a store that cannot renew, the timeout) end
	// the context with Err DeadlineExceeded, the others with Canceled: a
	// proxy answers 504 to the first and 502 to the second.
	now := time.Now()
	var deadline time.Time
	var why error
	if !renews && lease > 0 {
		deadline, why = now.Add(lease), ErrLeaseEnded
	}
	if d := cfg.Timeout; d > 0 && (deadline.IsZero() || now.Add(d).Before(deadline)) {
		deadline, why = now.Add(d), &TimeoutError{Timeout: d}
	}
	endDeadline := context.CancelFunc(func() {})
	if !deadline.IsZero() {
		parent, endDeadline = context.WithDeadlineCause(parent, deadline, why)
	}
	ctx, cancel := context.WithCancelCause(parent)
	var unhook []func() bool
	stopLease := func() (keystore.Claim, error) { return claim, nil }
	if renews {
		// Renewals do not end with the client, even under ClientCancel:
		// the handler's context ends with it then, through parent.
		lctx, stop := keystore.KeepAlive(context.WithoutCancel(req), s, claim, lease)
		stopLease = stop
		unhook = append(unhook, context.AfterFunc(lctx, func() { cancel(context.Cause(lctx)) }))
	}
	if cfg.Abort != nil {
		if cfg.Abort.Err() != nil {
			cancel(ErrAborted)
		} else {
			unhook = append(unhook, context.AfterFunc(cfg.Abort, func() { cancel(ErrAborted) }))
		}
	}
	var once sync.Once
	var last keystore.Claim
	var lost error
	return ctx, func() (keystore.Claim, error) {
		once.Do(func() {
			for _, u := range unhook {
				u()
			}
			last, lost = stopLease()
			cancel(context.Canceled)
			endDeadline()
		})
		return last, lost
	}
}

type valuesKey struct{}

type values struct {
	key   string
	claim keystore.Claim
}

// Key returns the client's idempotency key of the handler context ctx.
func Key(ctx context.Context) (string, bool) {
	v, ok := ctx.Value(valuesKey{}).(values)
	return v.key, ok
}

// Claim returns the claim under which the handler of ctx runs.
func Claim(ctx context.Context) (keystore.Claim, bool) {
	v, ok := ctx.Value(valuesKey{}).(values)
	return v.claim, ok
}
