package handlerctx_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idem-go/idem/internal/frontend/handlerctx"
	"github.com/idem-go/idem/keystore"
)

// extender is a store whose Extend answers as told and counts its calls.
type extender struct {
	keystore.Store
	mu    sync.Mutex
	calls int
	err   error // Extend's answer; nil renews
}

func (e *extender) Extend(_ context.Context, c keystore.Claim, lease time.Duration) (keystore.Claim, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.calls++
	if e.err != nil {
		return keystore.Claim{}, e.err
	}
	c.Expires = time.Now().Add(lease)
	return c, nil
}

func (e *extender) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.calls
}

const lease = 30 * time.Second

var claim = keystore.Claim{Key: "k", State: keystore.Acquired, Token: 7}

func TestShortHandlerRenewsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &extender{}
		ctx, run := handlerctx.Start(context.Background(), s, "k", claim, lease, handlerctx.Config{})
		time.Sleep(lease / 10) // a handler shorter than the first renewal
		c, err := run.Stop()
		if err != nil || c.Token != claim.Token || !c.Expires.Equal(claim.Expires) || s.count() != 0 {
			t.Fatalf("Stop: %v %v, %d Extend calls; want the claim, no error, none", c, err, s.count())
		}
		if ctx.Err() == nil {
			t.Fatal("the context outlived Stop")
		}
		if c2, err2 := run.Stop(); c2.Token != c.Token || err2 != err {
			t.Fatal("a second Stop returned other values")
		}
	})
}

func TestLongHandlerIsRenewed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &extender{}
		ctx, run := handlerctx.Start(context.Background(), s, "k", claim, lease, handlerctx.Config{})
		time.Sleep(3 * lease)
		if err := context.Cause(ctx); err != nil {
			t.Fatalf("the context ended while renewals succeeded: %v", err)
		}
		c, err := run.Stop()
		if err != nil || s.count() < 9 || !c.Expires.After(time.Now()) {
			t.Fatalf("after 3 leases: %d Extend calls (want at least one a third of a lease), claim expires %v, err %v", s.count(), c.Expires, err)
		}
	})
}

func TestLeaseLostEndsTheContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &extender{err: keystore.LeaseLostError("extend", "k", 7)}
		ctx, run := handlerctx.Start(context.Background(), s, "k", claim, lease, handlerctx.Config{})
		<-ctx.Done()
		if !errors.Is(context.Cause(ctx), keystore.ErrLeaseLost) || errors.Is(context.Cause(ctx), keystore.ErrLeaseNotRenewed) {
			t.Fatalf("cause %v, want the store's ErrLeaseLost", context.Cause(ctx))
		}
		if _, err := run.Stop(); !errors.Is(err, keystore.ErrLeaseLost) {
			t.Fatalf("Stop: %v", err)
		}
	})
}

func TestUnrenewedLeaseEndsTheContextInTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &extender{err: errors.New("connection refused")}
		start := time.Now()
		ctx, run := handlerctx.Start(context.Background(), s, "k", claim, lease, handlerctx.Config{})
		<-ctx.Done()
		if took := time.Since(start); took > lease-lease/10 {
			t.Fatalf("the context ended %v after Start, after the lease's safe end %v", took, lease-lease/10)
		}
		if !errors.Is(context.Cause(ctx), keystore.ErrLeaseNotRenewed) || s.count() < 2 {
			t.Fatalf("cause %v after %d Extend calls, want ErrLeaseNotRenewed after retries", context.Cause(ctx), s.count())
		}
		if _, err := run.Stop(); !errors.Is(err, keystore.ErrLeaseNotRenewed) {
			t.Fatalf("Stop: %v", err)
		}
	})
}
