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
	// Abort ends every handler context when it is aborted (nil: never).
	Abort *Abort
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
// (the request's context), and the run, whose Stop the caller calls once
// the handler has returned or panicked, before Complete or Release. The
// context carries key and claim for [Key] and [Claim].
//
// A store that renews leases is renewed by keystore.KeepAlive's rules and
// timer (a keystore.Renewal in the Run, ending the handler's context when
// the lease is lost): a handler that returns before the first renewal is
// due starts no goroutine.
func Start(req context.Context, s keystore.Store, key string, claim keystore.Claim, lease time.Duration, cfg Config) (context.Context, *Run) {
	// run.detached holds the claim for Stop in either case; it is the
	// handler's parent unless the client's cancellation is kept.
	run := &Run{detached: detached{req: req, v: values{key: key, claim: claim}}}
	var parent context.Context = &run.detached
	renewCtx := parent // values for Extend, without cancellation
	if cfg.ClientCancel {
		parent = context.WithValue(req, valuesKey{}, run.detached.v)
		renewCtx = context.WithoutCancel(req)
	}
	ext, renews := keystore.As[keystore.Extender](s)
	renews = renews && lease > 0
	// Deadlines (the lease of a store that cannot renew, the timeout) end
	// the context with Err DeadlineExceeded, the others with Canceled: a
	// proxy answers 504 to the first and 502 to the second.
	var deadline time.Time
	var why error
	if !renews && lease > 0 {
		deadline, why = time.Now().Add(lease), ErrLeaseEnded
	}
	if d := cfg.Timeout; d > 0 {
		if now := time.Now(); deadline.IsZero() || now.Add(d).Before(deadline) {
			deadline, why = now.Add(d), &TimeoutError{Timeout: d}
		}
	}
	if !deadline.IsZero() {
		parent, run.endDeadline = context.WithDeadlineCause(parent, deadline, why)
	}
	ctx, cancel := context.WithCancelCause(parent)
	run.cancel = cancel
	if renews {
		// Renewals do not end with the client, even under ClientCancel:
		// the handler's context ends with it then, through parent.
		run.renews = true
		run.renewal.Start(renewCtx, ext, claim, lease, cancel)
	}
	if cfg.Abort != nil {
		cfg.Abort.add(run)
	}
	return ctx, run
}

// Run is one handler's run under the context [Start] returned.
type Run struct {
	detached    detached
	renewal     keystore.Renewal // started if renews
	renews      bool
	cancel      context.CancelCauseFunc
	endDeadline context.CancelFunc // nil without a deadline

	// abort is Config.Abort; prev and next link the run into its list
	// of runs in flight while it is linked (under abort.mu).
	abort      *Abort
	prev, next *Run

	stopped bool
}

// Stop ends the renewals and the context and returns the claim with the
// Expires of the last renewal, and nil or the error (wrapping
// keystore.ErrLeaseLost) with which the lease was lost; calling it again
// returns the same. Call it from the goroutine that called Start.
func (r *Run) Stop() (keystore.Claim, error) {
	claim, lost := r.detached.v.claim, error(nil)
	if r.renews {
		claim, lost = r.renewal.Stop() // first: no renewal after the context ends; again: the same values
	}
	if !r.stopped {
		r.stopped = true
		if r.abort != nil {
			r.abort.remove(r)
		}
		r.cancel(context.Canceled)
		if r.endDeadline != nil {
			r.endDeadline()
		}
	}
	return claim, lost
}

// Abort ends the contexts of the handlers in flight, and of those that
// start later, with the cause [ErrAborted]: a server's last word once its
// shutdown grace period has passed. The zero value is ready to use.
//
// A handler registers with it by linking its run into a list, and leaves it
// by unlinking (no allocation, no map, no goroutine: what context.AfterFunc
// on an abort context would cost each request).
type Abort struct {
	mu      sync.Mutex
	head    *Run // the runs in flight, most recent first
	aborted bool
}

// Abort ends every handler context registered, and those registered
// later. Calling it again does nothing.
func (a *Abort) Abort() {
	a.mu.Lock()
	a.aborted = true
	var runs []*Run
	for r := a.head; r != nil; r = r.next {
		runs = append(runs, r)
	}
	a.mu.Unlock()
	// Outside the lock: a run that stops meanwhile is cancelled twice,
	// which does nothing the second time.
	for _, r := range runs {
		r.cancel(ErrAborted)
	}
}

// add links r, or ends its context at once if a has been aborted.
func (a *Abort) add(r *Run) {
	a.mu.Lock()
	if a.aborted {
		a.mu.Unlock()
		r.cancel(ErrAborted)
		return
	}
	r.abort, r.next = a, a.head
	if a.head != nil {
		a.head.prev = r
	}
	a.head = r
	a.mu.Unlock()
}

// remove unlinks r.
func (a *Abort) remove(r *Run) {
	a.mu.Lock()
	if r.prev != nil {
		r.prev.next = r.next
	} else if a.head == r {
		a.head = r.next
	}
	if r.next != nil {
		r.next.prev = r.prev
	}
	r.prev, r.next = nil, nil
	a.mu.Unlock()
}

// detached is context.WithoutCancel(req) and context.WithValue for the key
// and claim in one value: req's values, no cancellation, no deadline.
type detached struct {
	req context.Context
	v   values
}

func (d *detached) Deadline() (time.Time, bool) { return time.Time{}, false }
func (d *detached) Done() <-chan struct{}       { return nil }
func (d *detached) Err() error                  { return nil }
func (d *detached) String() string              { return "handlerctx.detached" }

func (d *detached) Value(key any) any {
	if _, ok := key.(valuesKey); ok {
		return d.v
	}
	return d.req.Value(key)
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
