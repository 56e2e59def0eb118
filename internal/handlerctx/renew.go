package handlerctx

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idem-go/idem/internal/retry"
	"github.com/idem-go/idem/keystore"
)

// renewer keeps a handler's lease alive as keystore.KeepAlive does, by the
// same rules (a renewal every third of the lease with jitter, each under
// keystore.Detach; the lease counted lost nine tenths of a lease after the
// last successful renewal was sent, or after Start), but driven by one
// timer instead of a goroutine started with the handler. Most keyed
// handlers return long before their first renewal is due: they pay for
// arming and stopping one timer, no goroutine, no channel, no second
// timer. The watchdog that ends the context when renewals fail is armed at
// the first renewal, since until then the lease Reserve took still holds.
type renewer struct {
	ext    keystore.Extender
	ctx    context.Context // values for Extend, without cancellation
	lease  time.Duration
	cancel context.CancelCauseFunc // ends the handler's context
	timer  *time.Timer             // the next renewal

	mu       sync.Mutex
	claim    keystore.Claim
	err      error       // set once the lease is lost
	stopped  bool        // stop was called: no more renewals
	deadline time.Time   // the lease counts until then, by this clock
	watchdog *time.Timer // armed at the first renewal
	inflight sync.WaitGroup
}

// minRenewal is the shortest wait between two renewals or retries, as
// keystore.KeepAlive's.
const minRenewal = 10 * time.Millisecond

// safe is how long after a renewal was sent (or Start was called) the
// handler still counts on its lease, as keystore.KeepAlive counts.
func safe(lease time.Duration) time.Duration { return lease - lease/10 }

// renewalPause draws the wait before the next renewal from [d/2, d].
func renewalPause(d time.Duration) time.Duration {
	return max(retry.Backoff{Min: d, Max: d}.Delay(0), minRenewal)
}

// start arms the first renewal; r must be the zero renewer.
func (r *renewer) start(ctx context.Context, ext keystore.Extender, claim keystore.Claim, lease time.Duration, cancel context.CancelCauseFunc) {
	r.mu.Lock() // renew may run before r.timer is set
	defer r.mu.Unlock()
	r.ext, r.ctx, r.lease, r.cancel, r.claim = ext, ctx, lease, cancel, claim
	r.deadline = time.Now().Add(safe(lease))
	r.timer = time.AfterFunc(renewalPause(lease/3), r.renew)
}

// lose records err as the reason the lease is lost and ends the handler's
// context with it. The first reason wins. Called with r.mu held.
func (r *renewer) lose(err error) {
	if r.err == nil {
		r.err = err
	}
	r.cancel(r.err)
}

// expired runs when the lease ends without a renewal.
func (r *renewer) expired() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.stopped {
		r.lose(fmt.Errorf("keystore: key %q: %w", r.claim.Key, keystore.ErrLeaseNotRenewed))
	}
}

// renew runs on the timer: one Extend, then the next renewal is armed.
func (r *renewer) renew() {
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
	dctx, cancel := keystore.Detach(r.ctx)
	nc, err := r.ext.Extend(dctx, c, r.lease)
	cancel()

	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case err == nil:
		r.claim = nc
		if r.err != nil || r.stopped {
			return // the lease ran out while Extend ran, or the handler returned
		}
		r.deadline = began.Add(safe(r.lease))
		r.watchdog.Reset(time.Until(r.deadline))
		r.timer.Reset(renewalPause(r.lease / 3))
	case errors.Is(err, keystore.ErrLeaseLost):
		r.lose(fmt.Errorf("keystore: renewing the lease of %q: %w", c.Key, err))
	default:
		// The store did not answer or failed: retry while the lease
		// lasts; the watchdog ends the context when it ends.
		left := time.Until(r.deadline)
		if left <= 0 {
			r.lose(fmt.Errorf("keystore: key %q: %w: last renewal error: %w", c.Key, keystore.ErrLeaseNotRenewed, err))
			return
		}
		if !r.stopped {
			r.timer.Reset(renewalPause(min(r.lease/3, left/3)))
		}
	}
}

// stop ends the renewals, waits for one in flight, and returns the claim
// with the Expires of the last renewal and why the lease was lost, if it
// was.
func (r *renewer) stop() (keystore.Claim, error) {
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
