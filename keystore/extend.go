package keystore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/retry"
)

// Extender is implemented by stores that can renew a live lease, so that an
// effect that takes longer than its lease is not run a second time by a
// caller that finds the lease expired. [Do], idemhttp and idemgrpc renew
// through [KeepAlive] while the effect runs.
//
// Extend sets the lease of c to end lease from now, measured by the store's
// clock from the call, capped by [CapDuration], and returns c with its new
// Expires. It is fenced like Complete: once the key was taken over,
// released, completed or swept, it returns an error wrapping [ErrLeaseLost]
// and changes nothing. Like Complete, it may succeed on a lease that has
// lapsed if nobody has taken the key over, because then nobody else can
// have started. Bad input (see [ValidateExtend]) is rejected before any I/O.
//
// Cancellation follows the [Store] rules: a ctx that ended before the call
// returns its error and changes nothing; a call under way runs to its end
// under [Detach]. If Extend returns an error that is not ErrLeaseLost, the
// lease may or may not have been renewed: keep counting from the old one.
//
// Crash: a renewal that did not land leaves the old lease, which expires as
// if Extend had not been called; a holder that dies stops renewing, so its
// key is free one lease after its last renewal.
type Extender interface {
	Extend(ctx context.Context, c Claim, lease time.Duration) (Claim, error)
}

// ValidateExtend checks the arguments of [Extender.Extend]: the claim (see
// [ValidateRelease]) and a positive lease (wraps idem.ErrInvalidArgument).
func ValidateExtend(c Claim, lease time.Duration) error {
	if err := ValidateRelease(c); err != nil {
		return err
	}
	if lease <= 0 {
		return fmt.Errorf("keystore: lease %v is not positive: %w", lease, idem.ErrInvalidArgument)
	}
	return nil
}

// CanExtend reports whether s renews leases: it implements [Extender], and
// so does every store it wraps (see [As]).
func CanExtend(s Store) bool {
	_, ok := As[Extender](s)
	return ok
}

// As returns s as the optional interface T ([Extender], [Inspector],
// [Forgetter], ...) when s implements it and so does every store it wraps:
// a wrapper such as keystoreprom.Store has an Unwrap() Store method and
// forwards the optional methods to the store it wraps, failing with
// errors.ErrUnsupported when that store lacks them.
func As[T any](s Store) (T, bool) {
	t, ok := s.(T)
	if !ok {
		return t, false
	}
	for cur := s; ; {
		u, isWrapper := cur.(interface{ Unwrap() Store })
		if !isWrapper {
			return t, true
		}
		cur = u.Unwrap()
		if _, ok := cur.(T); !ok {
			var zero T
			return zero, false
		}
	}
}

// ErrLeaseNotRenewed is the cause (see context.Cause) of a [KeepAlive]
// context cancelled because the lease could not be renewed before it
// ended: the store did not answer, or answered with errors. It wraps
// [ErrLeaseLost]: the holder must assume somebody else may now hold the key.
var ErrLeaseNotRenewed = fmt.Errorf("%w: lease not renewed before it ended", ErrLeaseLost)

// minRenewal is the shortest wait between two renewals or retries.
const minRenewal = 10 * time.Millisecond

// renewalPause draws the wait before the next renewal from [d/2, d] (the
// one jitter, internal/retry's), so that holders that reserved together do
// not renew in lockstep.
func renewalPause(d time.Duration) time.Duration {
	return retry.Backoff{Min: d, Max: d}.Delay(0)
}

// safe is how long after a renewal was sent (or KeepAlive was called) the
// holder still counts on its lease: nine tenths of it, a margin for the
// time the request took to reach the store and for clocks that run at
// slightly different rates.
func safe(lease time.Duration) time.Duration { return lease - lease/10 }

// KeepAlive keeps the lease of c, an Acquired claim of lease length lease,
// alive while the caller acts on it. It returns a context derived from ctx
// for the effect, and stop, which the caller calls once the effect has
// returned (or panicked), before Complete or Release.
//
// When s renews leases (see [CanExtend]), Extend is called every third of
// the lease, with jitter, each call under [Detach], from a timer: an effect
// that returns before its first renewal is due costs one timer armed and
// stopped, no goroutine. If the lease is
// lost (Extend returns [ErrLeaseLost]: the key was taken over, released or
// swept) or cannot be renewed before it ends by this process's clock
// (nine tenths of the lease after the last successful renewal was sent, or
// after the call to KeepAlive: a margin for the request's travel and for
// clock rates), the returned context is cancelled with a cause wrapping
// ErrLeaseLost (context.Cause), so that a holder that cannot renew stops
// acting before somebody else may start. Other Extend errors are retried
// until then. Call KeepAlive right after Reserve returns: the lease began
// when the store served Reserve.
//
// When s does not renew leases, nothing is started and the context is ctx's
// (with a cancel); the lease then ends when it ends, as without KeepAlive.
//
// stop ends the renewals, waits for one in flight, cancels the returned
// context, and returns c with the Expires of the last renewal and nil, or
// the error that cancelled the context (wrapping ErrLeaseLost) if the lease
// was lost. A lease that could not be renewed may still be completed if
// nobody took the key over; stop's error does not say the Complete will
// fail, only that the effect ran without the guarantee. Calling stop again
// returns the same values.
//
// Crash: if the process dies, renewals stop with it and the key is free
// one lease after the last renewal.
func KeepAlive(ctx context.Context, s Store, c Claim, lease time.Duration) (context.Context, func() (Claim, error)) {
	kctx, cancel := context.WithCancelCause(ctx)
	ext, ok := As[Extender](s)
	if !ok || lease <= 0 {
		return kctx, func() (Claim, error) { cancel(context.Canceled); return c, nil }
	}
	r := &Renewal{}
	r.Start(ctx, ext, c, lease, cancel)
	return kctx, func() (Claim, error) {
		c, err := r.Stop()
		cancel(context.Canceled)
		return c, err
	}
}

// Renewal is [KeepAlive]'s renewal of one lease, for a caller that owns
// the effect's context itself (idemhttp's and idemgrpc's handler
// contexts): the same rules, the same timer, and lost, the caller's
// cancel, called with the cause (wrapping [ErrLeaseLost]) when the lease
// is lost. Use the zero Renewal, Start it once and Stop it once the effect
// has returned; do not copy it after Start. It is driven by one timer
// instead of a goroutine started with the effect: most effects return long
// before their first renewal is due, and pay for arming and stopping one
// timer, no goroutine, no channel, no second timer. The watchdog that
// cancels the effect when renewals fail is armed at the first renewal,
// since until then the lease Reserve took still holds (a first renewal
// that fires late, past the deadline, arms it already expired).
type Renewal struct {
	ext   Extender
	ctx   context.Context // the caller's, for Extend's values (under Detach)
	lease time.Duration
	lost  context.CancelCauseFunc
	timer *time.Timer // the next renewal

	mu       sync.Mutex
	claim    Claim
	err      error       // set once the lease is lost
	stopped  bool        // Stop was called: no more renewals
	deadline time.Time   // the lease counts until then, by this clock
	watchdog *time.Timer // armed at the first renewal
	inflight sync.WaitGroup
}

// Start arms the first renewal of c, an Acquired claim of lease length
// lease (positive), through e; call it right after Reserve returns. ctx
// gives Extend its values (each Extend runs under [Detach]); lost is
// called, from the renewal's timer, with the reason the lease is lost.
func (r *Renewal) Start(ctx context.Context, e Extender, c Claim, lease time.Duration, lost context.CancelCauseFunc) {
	r.mu.Lock() // renew may run before r.timer is set
	defer r.mu.Unlock()
	r.ext, r.ctx, r.lease, r.lost, r.claim = e, ctx, lease, lost, c
	r.deadline = time.Now().Add(safe(lease))
	r.timer = time.AfterFunc(max(renewalPause(lease/3), minRenewal), r.renew)
}

// lose records err as the reason the lease is lost and calls lost with it.
// The first reason wins. Called with r.mu held.
func (r *Renewal) lose(err error) {
	if r.err == nil {
		r.err = err
	}
	r.lost(r.err)
}

// expired runs when the lease ends without a renewal.
func (r *Renewal) expired() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.stopped {
		r.lose(fmt.Errorf("keystore: key %q: %w", r.claim.Key, ErrLeaseNotRenewed))
	}
}

// renew runs on the timer: one Extend, then the next renewal is armed.
func (r *Renewal) renew() {
	r.mu.Lock()
	if r.stopped || r.err != nil {
		r.mu.Unlock()
		return
	}
	if r.watchdog == nil {
		r.watchdog = time.AfterFunc(time.Until(r.deadline), r.expired)
	}
	c := r.claim
	r.inflight.Add(1)
	r.mu.Unlock()
	defer r.inflight.Done()

	began := time.Now()
	dctx := detachCall(r.ctx, CallTimeout)
	nc, err := r.ext.Extend(dctx, c, r.lease)
	dctx.end()

	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case err == nil:
		r.claim = nc
		if r.err != nil || r.stopped {
			return // the lease ran out while Extend ran, or Stop was called
		}
		r.deadline = began.Add(safe(r.lease))
		r.watchdog.Reset(time.Until(r.deadline))
		r.timer.Reset(max(renewalPause(r.lease/3), minRenewal))
	case errors.Is(err, ErrLeaseLost):
		r.lose(fmt.Errorf("keystore: renewing the lease of %q: %w", c.Key, err))
	default:
		// The store did not answer or failed: retry while the lease
		// lasts; the watchdog cancels the effect when it ends.
		left := time.Until(r.deadline)
		if left <= 0 {
			r.lose(fmt.Errorf("keystore: key %q: %w: last renewal error: %w", c.Key, ErrLeaseNotRenewed, err))
			return
		}
		if !r.stopped {
			r.timer.Reset(max(renewalPause(min(r.lease/3, left/3)), minRenewal))
		}
	}
}

// Stop ends the renewals, waits for one in flight, and returns c with the
// Expires of the last renewal and nil, or the reason (wrapping
// [ErrLeaseLost]) the lease was lost. It does not call lost. Calling it
// again returns the same values.
func (r *Renewal) Stop() (Claim, error) {
	r.mu.Lock()
	r.stopped = true
	r.timer.Stop()
	if r.watchdog != nil {
		r.watchdog.Stop()
	}
	r.mu.Unlock()
	r.inflight.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.claim, r.err
}
