package idemhttp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idem-go/idem/keystore"
)

// boundCtx is the context of one store call: the request's values without
// its cancellation, ended by the store timeout. It is what
// context.WithTimeout(context.WithoutCancel(ctx), d) returns, except that
// its timer is started only if the store asks for Done (or registers a
// context.AfterFunc): a store that answers from memory and only checks Err
// (memstore) never needs one, and arming and stopping a runtime timer is a
// large part of a fast store call. Err compares the clock with the
// deadline, so the bound holds with or without the timer.
type boundCtx struct {
	parent   context.Context // without cancellation
	deadline time.Time

	mu     sync.Mutex
	err    error              // set once the context has ended
	timed  context.Context    // the timer-backed context, once asked for
	cancel context.CancelFunc // timed's
}

func newBoundCtx(ctx context.Context, d time.Duration) *boundCtx {
	return &boundCtx{parent: context.WithoutCancel(ctx), deadline: time.Now().Add(d)}
}

func (b *boundCtx) Deadline() (time.Time, bool) { return b.deadline, true }

// Value is the parent's: a context.WithoutCancel, which hides the
// request's cancellation from context.Cause and from children.
func (b *boundCtx) Value(key any) any { return b.parent.Value(key) }

func (b *boundCtx) Done() <-chan struct{} { return b.timer().Done() }

// AfterFunc lets context.AfterFunc and the children of a boundCtx
// (context.WithCancel) register with the timer-backed context instead of
// starting a goroutine to watch Done.
func (b *boundCtx) AfterFunc(f func()) func() bool { return context.AfterFunc(b.timer(), f) }

func (b *boundCtx) Err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.err != nil:
	case b.timed != nil:
		b.err = b.timed.Err()
	case !time.Now().Before(b.deadline):
		b.err = context.DeadlineExceeded
	}
	return b.err
}

// timer returns the timer-backed context, started on first use: ended
// already if b has ended.
func (b *boundCtx) timer() context.Context {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.timed == nil {
		b.timed, b.cancel = context.WithDeadline(b.parent, b.deadline)
		if b.err == context.Canceled {
			b.cancel()
		}
	}
	return b.timed
}

// end is the context's CancelFunc: it ends the context and releases the
// timer, if one was started.
func (b *boundCtx) end() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err == nil {
		if time.Now().Before(b.deadline) {
			b.err = context.Canceled
		} else {
			b.err = context.DeadlineExceeded
		}
	}
	if b.cancel != nil {
		b.cancel()
	}
}

// String names the context as context's own types do.
func (b *boundCtx) String() string { return fmt.Sprintf("idemhttp.storeCall(%v)", b.deadline) }

// reserve reserves the store key sk for r's request, as keystore.Await
// does: waiting as WithWait says, or, without a wait, one Reserve under a
// store call context (Await's outcomes, without its timer).
func (m *Middleware) reserve(ctx context.Context, sk string, fp []byte) (keystore.Claim, error) {
	if m.cfg.wait > 0 {
		return keystore.Await(ctx, m.store, sk, fp, m.cfg.lease, m.wait())
	}
	if err := ctx.Err(); err != nil {
		return keystore.Claim{}, fmt.Errorf("keystore: reserve %q: %w", sk, err)
	}
	sctx := m.storeCall(ctx)
	c, err := m.store.Reserve(sctx, sk, fp, m.cfg.lease)
	sctx.end()
	if err != nil {
		return c, err
	}
	switch c.State {
	case keystore.Done:
		return c, nil
	case keystore.Acquired:
		if err := ctx.Err(); err != nil {
			// ctx ended while Reserve ran: the caller will not act, so
			// give the key back at once rather than hold it for a lease.
			err = fmt.Errorf("keystore: key %q acquired after the context ended; released, the effect not run: %w", sk, err)
			sctx := m.storeCall(ctx)
			defer sctx.end()
			if rerr := m.store.Release(sctx, c); rerr != nil {
				return keystore.Claim{}, errors.Join(err, fmt.Errorf("keystore: release (the lease will expire): %w", rerr))
			}
			return keystore.Claim{}, err
		}
		return c, nil
	case keystore.InProgress:
		return c, &keystore.InProgressError{Key: sk, Expires: c.Expires}
	}
	return keystore.Claim{}, fmt.Errorf("keystore: %T.Reserve returned a claim in state %v", m.store, c.State)
}
