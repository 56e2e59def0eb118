// Package retry is idem's one backoff policy and its one context-aware
// sleep. Every loop in idem that retries or polls (the inbox's transaction
// retry, the SQL key store's conflict retry, keystore.Do's wait for a key in
// progress, the HTTP and gRPC waits, the broker adapters' redelivery) takes
// its delay from [Backoff.Delay] and waits with [Sleep].
package retry

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// Backoff is an exponential backoff with full jitter: the bound for attempt
// n (counting from 0) is Min·2ⁿ, capped at Max, and the delay is drawn
// uniformly between Min/2 and that bound. The floor keeps a poller from
// spinning; the jitter keeps waiters that started together from retrying in
// lockstep. The zero Backoff waits not at all.
type Backoff struct {
	Min, Max time.Duration
}

// Validate reports a Backoff whose bounds are negative or out of order.
func (b Backoff) Validate() error {
	switch {
	case b.Min < 0 || b.Max < 0:
		return fmt.Errorf("backoff %v..%v is negative", b.Min, b.Max)
	case b.Max < b.Min:
		return fmt.Errorf("backoff maximum %v is below its minimum %v", b.Max, b.Min)
	}
	return nil
}

// Bound returns the upper bound of the delay before retry number attempt
// (0 for the first retry): Min·2^attempt, at most Max.
func (b Backoff) Bound(attempt int) time.Duration {
	if attempt < 0 {
		attempt = 0
	}
	d := b.Min << min(attempt, 40)
	if d <= 0 || d > b.Max || d>>min(attempt, 40) != b.Min {
		d = b.Max
	}
	return d
}

// Delay returns a jittered delay for retry number attempt (0 for the first
// retry), between Min/2 and [Backoff.Bound].
func (b Backoff) Delay(attempt int) time.Duration {
	hi := b.Bound(attempt)
	lo := min(b.Min/2, hi)
	if hi-lo <= 0 {
		return hi
	}
	return lo + rand.N(hi-lo+1)
}

// Wait sleeps [Backoff.Delay](attempt), or until ctx ends.
func (b Backoff) Wait(ctx context.Context, attempt int) error {
	return Sleep(ctx, b.Delay(attempt))
}

// Sleep waits for d or until ctx ends, and then returns ctx's error. A
// non-positive d returns at once, with ctx's error if it has ended.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
