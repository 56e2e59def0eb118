package keystore

import (
	"context"
	"errors"
	"fmt"
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

// Option configures [Do]. It has the shape of every option in idem,
// func(*config) error; since Do is a call and not a constructor, its
// options are applied and validated on every call.
type Option func(*doConfig) error

type doConfig struct {
	lease, ttl time.Duration
	wait       Wait
}

// WithLease sets the lease Do reserves the key for (default
// [DefaultLease]). With a store that renews leases ([Extender]), Do
// renews it every third of its length while fn runs, so it bounds how long
// a dead holder keeps the key, not how long fn may take. With a store that
// cannot renew, choose it longer than fn's worst case, including
// downstream timeouts: a lease that runs out while fn still works lets a
// second caller run fn concurrently, and the first caller's Complete then
// fails with ErrLeaseLost. A lease that is not positive is refused.
func WithLease(d time.Duration) Option {
	return positive("lease", d, func(c *doConfig) { c.lease = d })
}

// WithTTL sets how long the result is kept after completion (default
// [DefaultTTL]); a retry after that runs fn again. A TTL that is not
// positive is refused.
func WithTTL(d time.Duration) Option {
	return positive("ttl", d, func(c *doConfig) { c.ttl = d })
}

// positive is an option that applies set when d is positive.
func positive(what string, d time.Duration, set func(*doConfig)) Option {
	return func(c *doConfig) error {
		if d <= 0 {
			return fmt.Errorf("keystore: %s %v is not positive: %w", what, d, idem.ErrInvalidOption)
		}
		set(c)
		return nil
	}
}

// WithWait makes Do wait while another holder has the key in progress,
// polling the store with jittered exponential backoff from pollMin up to
// pollMax (see [Await]), until the holder completes (Do returns its result,
// replayed), releases or loses its lease (Do takes the key over and runs
// fn), or ctx ends. Without it, Do fails fast with an [*InProgressError].
// It requires 0 < pollMin <= pollMax.
func WithWait(pollMin, pollMax time.Duration) Option {
	return func(c *doConfig) error {
		w := Wait{Min: pollMin, Max: pollMax}
		if err := w.validate(); err != nil || pollMax <= 0 {
			return fmt.Errorf("keystore: wait poll interval [%v, %v] is not 0 < min <= max: %w", pollMin, pollMax, idem.ErrInvalidOption)
		}
		c.wait = w
		return nil
	}
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
//     [WithWait], Do polls until it can return one of the two cases above
//     (the wait is [Await]'s).
//   - fp differs from the stored fingerprint: idem.ErrFingerprintMismatch, fn
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
// sooner.
//
// Do is a call, not a constructor: its options are applied and validated
// on every call; a bad option (or a nil one) returns an error wrapping
// idem.ErrInvalidOption before the store is touched.
func Do(ctx context.Context, s Store, key string, fp []byte, fn func(context.Context) ([]byte, error), opts ...Option) (result []byte, replayed bool, err error) {
	cfg := doConfig{lease: DefaultLease, ttl: DefaultTTL}
	if len(opts) > 0 {
		if cfg, err = configure(opts); err != nil {
			return nil, false, err
		}
	}
	var c Claim
	if err := awaitInto(ctx, s, key, fp, cfg.lease, &cfg.wait, &c); err != nil {
		return nil, false, err
	}
	if c.State == Done {
		return c.Result, true, nil
	}
	return run(ctx, s, &c, fn, cfg.lease, cfg.ttl)
}

// configure applies Do's options to the defaults. (An option is a func
// that takes the config's address, so the config it fills lives on the
// heap: here, not in Do, whose calls without options allocate none.)
func configure(opts []Option) (doConfig, error) {
	cfg := &doConfig{lease: DefaultLease, ttl: DefaultTTL}
	for _, o := range opts {
		if o == nil {
			return doConfig{}, fmt.Errorf("keystore: nil option: %w", idem.ErrInvalidOption)
		}
		if err := o(cfg); err != nil {
			return doConfig{}, err
		}
	}
	return *cfg, nil
}

// run executes fn under the acquired claim *c and records its outcome.
func run(ctx context.Context, s Store, c *Claim, fn func(context.Context) ([]byte, error), lease, ttl time.Duration) (result []byte, replayed bool, err error) {
	finished := false
	defer func() {
		if !finished {
			// fn panicked: give the key back so that a retry runs fn
			// again, then let the panic continue.
			_ = releaseDetached(ctx, s, c, CallTimeout)
		}
	}()
	fctx, stop := KeepAlive(context.WithValue(ctx, claimKey{}, *c), s, *c, lease)
	defer func() { _, _ = stop() }() // a panic in fn: stop renewing before Release
	result, err = fn(fctx)
	finished = true
	if _, lost := stop(); lost != nil && err != nil && !errors.Is(err, ErrLeaseLost) {
		// fn most likely gave up because its context was cancelled: say why.
		err = fmt.Errorf("%w (the effect's context was cancelled: %w)", err, lost)
	}
	if err != nil {
		return nil, false, releaseAfter(ctx, s, c, err)
	}
	// Not deferred: a store whose Complete panics leaves this context to
	// its deadline, and the call's frame stays small.
	cctx := detachCall(ctx, CallTimeout)
	cerr := s.Complete(cctx, *c, result, ttl)
	cctx.end()
	if cerr != nil {
		return result, false, fmt.Errorf("keystore: effect done but not recorded (the key stays in progress until its lease expires): %w", cerr)
	}
	return result, false, nil
}

// releaseAfter releases *c after fn failed with err, and returns the
// error Do reports.
func releaseAfter(ctx context.Context, s Store, c *Claim, err error) error {
	if rerr := releaseDetached(ctx, s, c, CallTimeout); rerr != nil {
		return errors.Join(err, fmt.Errorf("keystore: release after failure (the lease will expire): %w", rerr))
	}
	return err
}
