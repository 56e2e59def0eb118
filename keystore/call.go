package keystore

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// CallTimeout bounds the I/O of one store call once it has started, and the
// Complete or Release that [Do] issues after fn returns.
const CallTimeout = 10 * time.Second

// Detach returns the context under which a store runs a call that has
// passed its ctx check: ctx's values without its cancellation or deadline,
// bounded by [CallTimeout]. A write that the caller's cancellation
// interrupts half-way may commit and still report context.Canceled (a
// database/sql statement or COMMIT, a Redis reply not read), and the caller
// then believes that nothing happened: a Reserve that holds a key for a
// whole lease with nobody to release it, a Complete or Release that did
// land. Under Detach the call runs to its end and answers truthfully; only
// the timeout (a store that stopped answering) can still leave its outcome
// unknown. Release the returned cancel func when the call is done.
//
// The context behaves as context.WithTimeout(context.WithoutCancel(ctx),
// CallTimeout), except that its timer starts only if the store asks for
// Done (or registers a context.AfterFunc, or derives a cancellable
// child): a store that answers from memory and only checks Err never
// pays for one.
func Detach(ctx context.Context) (context.Context, context.CancelFunc) {
	c := detachCall(ctx, CallTimeout)
	return c, c.end
}

// DetachFor is [Detach] bounded by timeout instead of [CallTimeout] (0 or
// less: CallTimeout), for callers with a store timeout of their own
// (idemhttp's, idemgrpc's).
func DetachFor(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	c := detachCall(ctx, timeout)
	return c, c.end
}

// detachCall is [Detach] with a timeout of its own (0 or less:
// [CallTimeout]), returned as its concrete type so that keystore's own
// calls end it with end, without allocating a cancel func.
func detachCall(ctx context.Context, timeout time.Duration) *callContext {
	if timeout <= 0 {
		timeout = CallTimeout
	}
	return &callContext{parent: ctx, deadline: time.Now().Add(timeout)}
}

// callContext is the context of one store call made by detachCall: the
// caller's values without its cancellation, ended by a timeout, or by end.
// Err compares the clock with the deadline, so the bound holds whether or
// not a timer was ever started; a timer starts only when Done is asked for
// (or context.AfterFunc, or a cancellable child, registers with it).
type callContext struct {
	// parent is the caller's context, whose cancellation the call does
	// not see: Value and the timer go through nocancel.
	parent   context.Context
	deadline time.Time

	mu       sync.Mutex
	nocancel context.Context    // context.WithoutCancel(parent), once asked for
	err      error              // set once the context has ended
	timed    context.Context    // the timer-backed context, once asked for
	cancel   context.CancelFunc // timed's
}

// Deadline is the end of the call's timeout.
func (c *callContext) Deadline() (time.Time, bool) { return c.deadline, true }

// Value is the caller's: a context.WithoutCancel, which hides the caller's
// cancellation from context.Cause and from children.
func (c *callContext) Value(key any) any { return c.detached().Value(key) }

// detached returns context.WithoutCancel(c.parent), made on first use: a
// store that answers from memory and reads no value pays no allocation
// for it.
func (c *callContext) detached() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.detachedLocked()
}

func (c *callContext) detachedLocked() context.Context {
	if c.nocancel == nil {
		c.nocancel = context.WithoutCancel(c.parent)
	}
	return c.nocancel
}

// Done starts the timer, if it has not started yet.
func (c *callContext) Done() <-chan struct{} { return c.timer().Done() }

// AfterFunc lets context.AfterFunc and the children of a callContext
// (context.WithCancel) register with the timer-backed context instead of
// starting a goroutine to watch Done.
func (c *callContext) AfterFunc(f func()) func() bool { return context.AfterFunc(c.timer(), f) }

// Err is context.DeadlineExceeded past the deadline, context.Canceled after
// end (whichever it reported first), nil before.
func (c *callContext) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.err != nil:
	case c.timed != nil:
		c.err = c.timed.Err()
	case time.Until(c.deadline) <= 0: // one monotonic clock read, not time.Now's two
		c.err = context.DeadlineExceeded
	}
	return c.err
}

// timer returns the timer-backed context, started on first use: ended
// already if c has ended.
func (c *callContext) timer() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timed == nil {
		c.timed, c.cancel = context.WithDeadline(c.detachedLocked(), c.deadline)
		if c.err == context.Canceled {
			c.cancel()
		}
	}
	return c.timed
}

// end is the context's CancelFunc: it ends the context and releases the
// timer, if one was started. Calling it again does nothing.
func (c *callContext) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = context.Canceled // without a clock read: the call is over
	}
	if c.cancel != nil {
		c.cancel()
	}
}

// String names the context as context's own types do.
func (c *callContext) String() string { return fmt.Sprintf("keystore.Detach(%v)", c.deadline) }
