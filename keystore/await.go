package keystore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/retry"
)

// Wait says how [Await] waits while another holder has a key in progress.
// The zero Wait does not wait: one Reserve, and an in-progress key is
// reported at once.
type Wait struct {
	// Min and Max bound the pause between two Reserve calls: exponential
	// from Min up to Max, with full jitter so that waiters that arrived
	// together do not poll the store in lockstep. Max == 0 does not wait;
	// otherwise 0 < Min <= Max.
	Min, Max time.Duration
	// Timeout bounds the whole wait, counted from the call (0: until ctx
	// ends). Await polls one last time at the deadline and then reports
	// the key in progress.
	Timeout time.Duration
	// CallTimeout bounds each Reserve, which runs detached from ctx
	// (0: [CallTimeout]).
	CallTimeout time.Duration
}

// enabled reports whether w waits at all.
func (w *Wait) enabled() bool { return w.Max > 0 }

// validate names what is wrong with w, without a package prefix or sentinel.
func (w *Wait) validate() error {
	switch {
	case w.Timeout < 0 || w.CallTimeout < 0:
		return fmt.Errorf("wait timeout %v or call timeout %v is negative", w.Timeout, w.CallTimeout)
	case !w.enabled() && w.Min == 0:
		return nil
	case w.Min <= 0 || w.Max < w.Min:
		return fmt.Errorf("wait poll interval [%v, %v] is not 0 < min <= max", w.Min, w.Max)
	}
	return nil
}

// Await reserves key (see [Store.Reserve]) and, while another holder has it
// in progress, waits as w says and reserves again, until the key is
// Acquired or Done, the wait's Timeout passes, or ctx ends. It is the wait
// under [Do], idemhttp's and idemgrpc's: call it directly to run the
// effect yourself (Complete or Release the Acquired claim it returns).
//
// Outcomes:
//
//   - Acquired or Done: the claim, nil error.
//   - in progress, and w does not wait or its Timeout has passed: the
//     holder's InProgress claim (Expires is its lease end) and an
//     [*InProgressError].
//   - ctx ends while Await waits: the last InProgress claim and an error
//     matching both ErrInProgress and ctx's error.
//   - ctx ended before the first Reserve: an error wrapping ctx's error; the
//     store is not touched.
//   - the key was Acquired but ctx ended while Reserve ran: the key is
//     released at once (joined with the release's error if that fails) and
//     the error wraps ctx's error; the caller must not run the effect.
//   - Reserve fails (ErrFingerprintMismatch, a store error): that error.
//
// When s is a [Notifier] (and so is every store it wraps, see [As]),
// Await subscribes to key's changes after the first Reserve that finds it
// in progress, reserves once more, and then wakes as soon as the holder
// completes or releases the key; the polls go on beside it, so a
// notification lost or never sent costs one poll, and an expired lease,
// which sends none, is found by polling as before. When s is a [Peeker]
// (through every wrapper, as for Notifier), each look after the first
// peeks before it reserves: a key done meanwhile is answered from a read,
// so that many waiters woken at once by one completion do not queue on
// the key's lock.
//
// Each Reserve (and Peek) runs detached from ctx (see [Detach], bounded by
// w.CallTimeout), so that its answer is true even if ctx ends while it runs:
// a store cut off half-way could take the key and report an error, leaving
// it in progress for a whole lease with nobody to release it. Only the
// pauses between calls end with ctx. A bad w returns an error wrapping
// idem.ErrInvalidArgument before the store is touched.
//
// Crash: Await writes nothing but what Reserve writes. If the process dies
// after a Reserve that acquired the key, the key stays in progress until
// the lease expires, as after a bare Reserve.
func Await(ctx context.Context, s Store, key string, fp []byte, lease time.Duration, w Wait) (Claim, error) {
	var c Claim
	err := awaitInto(ctx, s, key, fp, lease, &w, &c)
	return c, err
}

// awaitInto is Await answering in *c. Await's layers pass the claim by
// pointer, and the wait is a function of its own that most calls never
// enter: a router that starts a goroutine a message (Watermill's) pays for
// each byte of stack on this path by growing that goroutine's stack.
func awaitInto(ctx context.Context, s Store, key string, fp []byte, lease time.Duration, w *Wait, c *Claim) error {
	if err := w.validate(); err != nil {
		return fmt.Errorf("keystore: %w: %w", err, idem.ErrInvalidArgument)
	}
	var deadline time.Time
	if w.Timeout > 0 {
		deadline = time.Now().Add(w.Timeout)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("keystore: reserve %q: %w", key, err)
	}
	// reserveDetached, written out: one frame less between the caller and
	// the store. (Not deferred: a store whose Reserve panics leaves the
	// call's context to its deadline.)
	dctx := detachCall(ctx, w.CallTimeout)
	var err error
	*c, err = s.Reserve(dctx, key, fp, lease)
	dctx.end()
	if err != nil || c.State != InProgress {
		return answer(ctx, s, c, err, w.CallTimeout)
	}
	return await(ctx, s, key, fp, lease, w, &deadline, c)
}

// await is Await once a Reserve found the key in progress (*c): it waits,
// looks again, and answers as Await does, in *c.
func await(ctx context.Context, s Store, key string, fp []byte, lease time.Duration, w *Wait, deadline *time.Time, c *Claim) error {
	backoff := retry.Backoff{Min: w.Min, Max: w.Max}
	n := watch{w: *w, deadline: *deadline, key: key}
	n.notifier, n.can = As[Notifier](s)
	peeker, canPeek := As[Peeker](s)
	defer n.stop()
	polls := 0 // pauses so far, for the backoff
	for {
		// *c, the last answer, is InProgress.
		if w.enabled() && n.wake == nil && n.arm(ctx) {
			// Subscribed after a Reserve that found the key in progress:
			// reserve once more at once, so that a change between the two
			// is not missed; from then on a change wakes the wait.
		} else {
			pause := backoff.Delay(polls)
			polls++
			if !n.deadline.IsZero() {
				pause = min(pause, time.Until(n.deadline))
			}
			if !w.enabled() || pause <= 0 {
				return &InProgressError{Key: key, Expires: c.Expires}
			}
			if err := n.sleep(ctx, pause); err != nil {
				return fmt.Errorf("keystore: waiting for key %q: %w: %w", key, ErrInProgress, err)
			}
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("keystore: waiting for key %q: %w: %w", key, ErrInProgress, err)
		}
		if canPeek {
			// After a pause (or the subscription's second look), a key that
			// is done now is read, not reserved: no lock, no commit.
			if p, ok := peekDetached(ctx, peeker, key, fp, w.CallTimeout); ok {
				*c = p
				return nil
			}
		}
		err := reserveDetached(ctx, s, key, fp, lease, w.CallTimeout, c)
		if err != nil || c.State != InProgress {
			return answer(ctx, s, c, err, w.CallTimeout)
		}
	}
}

// answer is Await's answer to a Reserve that did not find the key in
// progress (*c, err): its error, the completed key, or the key acquired
// (given back at once if ctx ended while Reserve ran: the caller will not
// act, and *c is cleared).
func answer(ctx context.Context, s Store, c *Claim, err error, timeout time.Duration) error {
	switch {
	case err != nil:
		return err
	case c.State == Done:
		return nil
	case c.State == Acquired:
		if err := ctx.Err(); err != nil {
			err = releaseUnused(ctx, s, c, err, timeout)
			*c = Claim{}
			return err
		}
		return nil
	}
	err = fmt.Errorf("keystore: %T.Reserve returned a claim in state %v", s, c.State)
	*c = Claim{}
	return err
}

// watch is Await's subscription to its key's changes, when the store is a
// [Notifier].
type watch struct {
	notifier Notifier
	can      bool
	w        Wait
	deadline time.Time
	key      string
	wake     <-chan struct{} // nil: not subscribed
	cancel   func()
}

// arm subscribes to the key's next change, replacing the subscription
// that fired (the new one first, so that a store keeps its subscription
// to the key), and reports whether it did. Subscribing waits at most one
// poll interval (w.Max): a store that cannot subscribe by then is polled.
func (n *watch) arm(ctx context.Context) bool {
	if !n.can {
		return false
	}
	limit := n.w.Max
	if !n.deadline.IsZero() {
		limit = min(limit, time.Until(n.deadline))
	}
	if limit <= 0 {
		return false
	}
	nctx, cancel := context.WithTimeout(ctx, limit)
	ch, stop, err := n.notifier.Notify(nctx, n.key)
	cancel()
	n.stop()
	if err != nil {
		if errors.Is(err, errors.ErrUnsupported) {
			n.can = false // this store cannot, after all: poll from now on
		}
		return false
	}
	n.wake, n.cancel = ch, stop
	return true
}

// stop ends the subscription, if any.
func (n *watch) stop() {
	if n.cancel != nil {
		n.cancel()
	}
	n.wake, n.cancel = nil, nil
}

// sleep waits for pause, the key's next change or the end of ctx. After a
// change it subscribes again before it returns, so that the Reserve that
// follows is covered.
func (n *watch) sleep(ctx context.Context, pause time.Duration) error {
	if n.wake == nil {
		return retry.Sleep(ctx, pause)
	}
	t := time.NewTimer(pause)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	case <-n.wake:
		if !n.arm(ctx) {
			n.stop()
		}
		return nil
	}
}

// reserveDetached calls s.Reserve under detachCall(ctx, timeout) and
// answers in *c.
func reserveDetached(ctx context.Context, s Store, key string, fp []byte, lease, timeout time.Duration, c *Claim) (err error) {
	dctx := detachCall(ctx, timeout)
	defer dctx.end()
	*c, err = s.Reserve(dctx, key, fp, lease)
	return err
}

// releaseUnused gives back *c, acquired after ctx ended (cause), and
// returns the error Await reports.
func releaseUnused(ctx context.Context, s Store, c *Claim, cause error, timeout time.Duration) error {
	err := fmt.Errorf("keystore: key %q acquired after the context ended; released, the effect not run: %w", c.Key, cause)
	if rerr := releaseDetached(ctx, s, c, timeout); rerr != nil {
		return errors.Join(err, fmt.Errorf("keystore: release (the lease will expire): %w", rerr))
	}
	return err
}

// releaseDetached calls s.Release(*c) under detachCall(ctx, timeout): the
// release after a failed, panicked or unused claim.
func releaseDetached(ctx context.Context, s Store, c *Claim, timeout time.Duration) error {
	dctx := detachCall(ctx, timeout)
	defer dctx.end()
	return s.Release(dctx, *c)
}
