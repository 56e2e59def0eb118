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
func (w Wait) enabled() bool { return w.Max > 0 }

// validate names what is wrong with w, without a package prefix or sentinel.
func (w Wait) validate() error {
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
// Each Reserve runs detached from ctx (see [Detach], bounded by
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
	if err := w.validate(); err != nil {
		return Claim{}, fmt.Errorf("keystore: %w: %w", err, idem.ErrInvalidArgument)
	}
	backoff := retry.Backoff{Min: w.Min, Max: w.Max}
	var deadline time.Time
	if w.Timeout > 0 {
		deadline = time.Now().Add(w.Timeout)
	}
	var last Claim // the last InProgress answer
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			if attempt > 0 {
				return last, fmt.Errorf("keystore: waiting for key %q: %w: %w", key, ErrInProgress, err)
			}
			return Claim{}, fmt.Errorf("keystore: reserve %q: %w", key, err)
		}
		c, err := reserveDetached(ctx, s, key, fp, lease, w.CallTimeout)
		if err != nil {
			return c, err
		}
		switch c.State {
		case Done:
			return c, nil
		case Acquired:
			if err := ctx.Err(); err != nil {
				// ctx ended while Reserve ran: the caller will not act, so
				// give the key back at once rather than hold it for a lease.
				return Claim{}, releaseUnused(ctx, s, c, err, w.CallTimeout)
			}
			return c, nil
		case InProgress:
		default:
			return Claim{}, fmt.Errorf("keystore: %T.Reserve returned a claim in state %v", s, c.State)
		}
		last = c
		pause := backoff.Delay(attempt)
		if !deadline.IsZero() {
			pause = min(pause, time.Until(deadline))
		}
		if !w.enabled() || pause <= 0 {
			return c, &InProgressError{Key: key, Expires: c.Expires}
		}
		if err := retry.Sleep(ctx, pause); err != nil {
			return c, fmt.Errorf("keystore: waiting for key %q: %w: %w", key, ErrInProgress, err)
		}
	}
}

// detach is [Detach] with a timeout of its own (0: [CallTimeout]).
func detach(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if timeout <= 0 {
		timeout = CallTimeout
	}
	return context.WithTimeout(context.WithoutCancel(ctx), timeout)
}

// reserveDetached calls s.Reserve under detach(ctx, timeout).
func reserveDetached(ctx context.Context, s Store, key string, fp []byte, lease, timeout time.Duration) (Claim, error) {
	dctx, cancel := detach(ctx, timeout)
	defer cancel()
	return s.Reserve(dctx, key, fp, lease)
}

// releaseUnused gives back c, acquired after ctx ended (cause), and returns
// the error Await reports.
func releaseUnused(ctx context.Context, s Store, c Claim, cause error, timeout time.Duration) error {
	err := fmt.Errorf("keystore: key %q acquired after the context ended; released, the effect not run: %w", c.Key, cause)
	dctx, cancel := detach(ctx, timeout)
	defer cancel()
	if rerr := s.Release(dctx, c); rerr != nil {
		return errors.Join(err, fmt.Errorf("keystore: release (the lease will expire): %w", rerr))
	}
	return err
}
