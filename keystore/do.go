package keystore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/idem-go/idem"
)

// Defaults of [Do].
const (
	// DefaultLease is the lease Do takes unless WithLease says otherwise.
	// It must exceed the longest time fn can take: when it runs out, another
	// caller may run fn again.
	DefaultLease = 30 * time.Second
	// DefaultTTL is how long Do keeps a result unless WithTTL says
	// otherwise. It must cover the duplicate horizon: the longest time after
	// which a retry or redelivery can still arrive.
	DefaultTTL = 24 * time.Hour
)

// Option configures [Do].
type Option func(*doConfig)

type doConfig struct {
	lease, ttl       time.Duration
	wait             bool
	pollMin, pollMax time.Duration
}

// WithLease sets the lease Do reserves the key for (default
// [DefaultLease]). With a store that renews leases ([Extender]), Do
// renews it every third of its length while fn runs, so it bounds how long
// a dead holder keeps the key, not how long fn may take. With a store that
// cannot renew, choose it longer than fn's worst case, including
// downstream timeouts: a lease that runs out while fn still works lets a
// second caller run fn concurrently, and the first caller's Complete then
// fails with ErrLeaseLost.
func WithLease(d time.Duration) Option { return func(c *doConfig) { c.lease = d } }

// WithTTL sets how long the result is kept after completion (default
// [DefaultTTL]); a retry after that runs fn again.
func WithTTL(d time.Duration) Option { return func(c *doConfig) { c.ttl = d } }

// WithWait makes Do wait while another holder has the key in progress,
// polling the store with jittered exponential backoff from pollMin up to
// pollMax, until the holder completes (Do returns its result, replayed),
// releases or loses its lease (Do takes the key over and runs fn), or ctx
// ends. Without it, Do fails fast with an [*InProgressError].
func WithWait(pollMin, pollMax time.Duration) Option {
	return func(c *doConfig) { c.wait, c.pollMin, c.pollMax = true, pollMin, pollMax }
}

func (c *doConfig) validate() error {
	switch {
	case c.lease <= 0:
		return fmt.Errorf("%w: keystore: lease %v is not positive", idem.ErrInvalidOption, c.lease)
	case c.ttl <= 0:
		return fmt.Errorf("%w: keystore: ttl %v is not positive", idem.ErrInvalidOption, c.ttl)
	case c.wait && (c.pollMin <= 0 || c.pollMax < c.pollMin):
		return fmt.Errorf("%w: keystore: wait poll interval [%v, %v] is not 0 < min <= max", idem.ErrInvalidOption, c.pollMin, c.pollMax)
	}
	return nil
}

type claimKey struct{}

// ClaimFrom returns the claim under which [Do] runs fn. Pass its Token to
// downstream systems that fence stale writers, and look at Takeover to learn
// that an earlier holder died mid-way (and may have run the effect).
func ClaimFrom(ctx context.Context) (Claim, bool) {
	c, ok := ctx.Value(claimKey{}).(Claim)
	return c, ok
}

// Do runs fn at most once per key while the key's result is retained, for
// effects that cannot share a transaction with the key (an email, a call to
// a payment API): Reserve → fn → Complete, or Release when fn fails.
//
//   - Acquired: fn runs with a ctx that carries the claim (see [ClaimFrom]).
//     fn returns nil error: its result is stored with Complete and returned
//     with replayed == false. fn returns an error or panics: the key is
//     released so that a retry runs fn again, and fn's error is returned
//     (the panic continues).
//   - Done: fn does not run; the stored result is returned with replayed ==
//     true. Replays are outcomes, not errors: acknowledge the message.
//   - InProgress: an [*InProgressError] (matching ErrInProgress), or, with
//     [WithWait], Do polls until it can return one of the two cases above.
//   - fp differs from the stored fingerprint: ErrFingerprintMismatch, fn
//     does not run.
//
// fn should send key downstream as well, as the Idempotency-Key of a Stripe
// request or the message id of an email, because one window cannot be
// closed from here: if the process dies after fn's effect and before
// Complete, the key stays in progress until its lease expires, and then a
// retry runs fn again. Downstream deduplication on the same key turns that
// repeat into a no-op.
//
// Lease keep-alive: when s implements [Extender] (see [CanExtend]), Do
// renews the lease while fn runs (see [KeepAlive]): an effect that takes
// longer than the lease is not run again by a caller that would otherwise
// find the lease expired. If the lease is lost anyway (the key was
// released or taken over by an operator, or the store could not renew it
// before it ended), fn's ctx is cancelled with a cause wrapping
// ErrLeaseLost (context.Cause), so that fn stops acting; Do then returns an
// error matching ErrLeaseLost. With a store that cannot renew, the lease is
// not renewed and fn's ctx is not bounded by it, as before: choose a lease
// longer than fn's worst case.
//
// What happens if the process dies:
//
//   - before Reserve: nothing was recorded; a retry runs fn.
//   - after Reserve, before or during fn: renewals stop with the process;
//     the key is in progress until the lease (from its last renewal)
//     expires; retries get ErrInProgress (or wait), then take the key over
//     with a higher token and run fn.
//   - after fn's effect, before Complete: as above, fn runs again after the
//     lease; downstream deduplication by key absorbs it.
//   - after Complete: retries get the stored result until the TTL ends.
//
// Cancellation: ctx ending means "stop waiting, do not start fn", never
// "abandon a store call half-way". Do checks ctx before each Reserve (an
// ended ctx returns its error, wrapped, and touches nothing); each Reserve
// runs under [Detach], so that its answer is true even if ctx ends while
// it runs; and a key acquired after ctx ended is released at once, without
// running fn, and Do returns ctx's error. A replay found after ctx ended
// is still returned. With [WithWait], ctx ending while Do waits returns an
// error matching both ErrInProgress and ctx's error.
//
// Complete and Release run even when ctx has been cancelled meanwhile (the
// effect has happened or has failed either way), bounded by [CallTimeout].
// If Release fails, Do returns fn's error joined with the release error and
// the key stays in progress until its lease expires. If Complete fails
// (store unreachable, result too large, lease lost), Do returns fn's result
// with that error and does not release the key: the effect has happened,
// and holding the lease until it expires keeps retries from repeating it
// sooner. Options are validated on every call; a bad option returns an
// error wrapping idem.ErrInvalidOption before the store is touched.
func Do(ctx context.Context, s Store, key string, fp []byte, fn func(context.Context) ([]byte, error), opts ...Option) (result []byte, replayed bool, err error) {
	cfg := doConfig{lease: DefaultLease, ttl: DefaultTTL}
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, false, err
	}
	poll := cfg.pollMin
	waited := false
	for {
		if err := ctx.Err(); err != nil {
			if waited {
				return nil, false, fmt.Errorf("keystore: waiting for key %q: %w: %w", key, ErrInProgress, err)
			}
			return nil, false, fmt.Errorf("keystore: reserve %q: %w", key, err)
		}
		c, err := reserveDetached(ctx, s, key, fp, cfg.lease)
		if err != nil {
			return nil, false, err
		}
		switch c.State {
		case Done:
			return c.Result, true, nil
		case Acquired:
			if err := ctx.Err(); err != nil {
				// ctx ended while Reserve ran: do not start fn, and give
				// the key back at once rather than hold it for a lease.
				return nil, false, releaseUnused(ctx, s, c, err)
			}
			return run(ctx, s, c, fn, cfg.lease, cfg.ttl)
		case InProgress:
			if !cfg.wait {
				return nil, false, &InProgressError{Key: key, Expires: c.Expires}
			}
			if err := sleep(ctx, jitter(poll)); err != nil {
				return nil, false, fmt.Errorf("keystore: waiting for key %q: %w: %w", key, ErrInProgress, err)
			}
			poll = min(poll*2, cfg.pollMax)
			waited = true
		default:
			return nil, false, fmt.Errorf("keystore: %T.Reserve returned a claim in state %v", s, c.State)
		}
	}
}

// reserveDetached calls s.Reserve under Detach(ctx): a store that gives up
// half-way when ctx is cancelled may have taken the key and still report
// an error, and Do would then leave the key in progress for a whole lease
// with nobody to release it. Detached, Reserve answers truthfully, and Do
// releases a key acquired after ctx ended.
func reserveDetached(ctx context.Context, s Store, key string, fp []byte, lease time.Duration) (Claim, error) {
	dctx, cancel := Detach(ctx)
	defer cancel()
	return s.Reserve(dctx, key, fp, lease)
}

// releaseUnused gives back c, acquired after ctx ended (cause), without
// running fn, and returns the error Do reports.
func releaseUnused(ctx context.Context, s Store, c Claim, cause error) error {
	err := fmt.Errorf("keystore: key %q acquired after the context ended; released, fn not run: %w", c.Key, cause)
	dctx, cancel := Detach(ctx)
	defer cancel()
	if rerr := s.Release(dctx, c); rerr != nil {
		return errors.Join(err, fmt.Errorf("keystore: release (the lease will expire): %w", rerr))
	}
	return err
}

// run executes fn under the acquired claim c and records its outcome.
func run(ctx context.Context, s Store, c Claim, fn func(context.Context) ([]byte, error), lease, ttl time.Duration) (result []byte, replayed bool, err error) {
	finished := false
	defer func() {
		if finished {
			return
		}
		// fn panicked: give the key back so that a retry runs fn again,
		// then let the panic continue.
		cctx, cancel := Detach(ctx)
		defer cancel()
		_ = s.Release(cctx, c)
	}()
	fctx, stop := KeepAlive(context.WithValue(ctx, claimKey{}, c), s, c, lease)
	defer func() { _, _ = stop() }() // a panic in fn: stop renewing before Release
	result, err = fn(fctx)
	finished = true
	if _, lost := stop(); lost != nil && err != nil && !errors.Is(err, ErrLeaseLost) {
		// fn most likely gave up because its context was cancelled: say why.
		err = fmt.Errorf("%w (the effect's context was cancelled: %w)", err, lost)
	}

	cctx, cancel := Detach(ctx)
	defer cancel()
	if err != nil {
		if rerr := s.Release(cctx, c); rerr != nil {
			return nil, false, errors.Join(err, fmt.Errorf("keystore: release after failure (the lease will expire): %w", rerr))
		}
		return nil, false, err
	}
	if cerr := s.Complete(cctx, c, result, ttl); cerr != nil {
		return result, false, fmt.Errorf("keystore: effect done but not recorded (the key stays in progress until its lease expires): %w", cerr)
	}
	return result, false, nil
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// jitter returns a duration in [d/2, d], so that waiters do not poll in
// lockstep.
func jitter(d time.Duration) time.Duration {
	if d < 2 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}
