package keystore_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/testsupport/dbtest"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/storetest"
)

const testLease = 300 * time.Millisecond

// slowEffect runs, with Do and a lease of testLease, an effect that takes
// 3.5 leases while 4 other callers retry the key every 100 ms, and returns
// how often the effect ran and the first caller's error.
func slowEffect(t *testing.T, s keystore.Store) (runs int32, firstErr error) {
	t.Helper()
	return slowEffectLease(t, s, testLease)
}

// slowEffectLease is slowEffect with a lease of its own.
func slowEffectLease(t *testing.T, s keystore.Store, lease time.Duration) (runs int32, firstErr error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var n atomic.Int32
	effect := func(ctx context.Context) ([]byte, error) {
		n.Add(1)
		select {
		case <-time.After(lease * 7 / 2):
			return []byte("ok"), nil
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
	started := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		_, _, firstErr = keystore.Do(ctx, s, "slow", nil, func(ctx context.Context) ([]byte, error) {
			close(started)
			return effect(ctx)
		}, keystore.WithLease(lease))
	})
	<-started
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				_, _, err := keystore.Do(ctx, s, "slow", nil, effect, keystore.WithLease(lease))
				if !errors.Is(err, keystore.ErrInProgress) {
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	return n.Load(), firstErr
}

func TestDoRenewsLease(t *testing.T) {
	t.Parallel()
	s := newLeaseStore()
	runs, err := slowEffect(t, s)
	t.Logf("with renewals: the effect ran %d time(s); first caller's error: %v; %d Extend calls", runs, err, s.Extends.Load())
	if runs != 1 || err != nil {
		t.Fatalf("an effect 3.5x its lease ran %d times (first caller: %v), want once and no error", runs, err)
	}
	c, _ := s.Reserve(context.Background(), "slow", nil, time.Minute)
	if c.State != keystore.Done || string(c.Result) != "ok" {
		t.Fatalf("after Do: %v %q, want the stored result", c.State, c.Result)
	}
}

// The same scenario with a store that cannot renew is the behaviour before
// keep-alive: the effect runs again once the lease ends.
func TestDoWithoutExtenderDoesNotRenew(t *testing.T) {
	t.Parallel()
	runs, err := slowEffect(t, noExtend{newLeaseStore()})
	t.Logf("without renewals: the effect ran %d time(s); first caller's error: %v", runs, err)
	if runs < 2 || !errors.Is(err, keystore.ErrLeaseLost) {
		t.Fatalf("without Extender: %d runs, first caller %v; want repeats and ErrLeaseLost (the test proves nothing otherwise)", runs, err)
	}
}

func TestDoLostLeaseCancelsEffect(t *testing.T) {
	t.Parallel()
	s := newLeaseStore()
	ctx := context.Background()
	var cause error
	_, _, err := keystore.Do(ctx, s, "k", nil, func(fctx context.Context) ([]byte, error) {
		c, _ := keystore.ClaimFrom(fctx)
		if err := s.Release(ctx, c); err != nil { // an operator's fenced release
			return nil, err
		}
		select {
		case <-fctx.Done():
			cause = context.Cause(fctx)
			return nil, fctx.Err()
		case <-time.After(20 * testLease):
			return nil, errors.New("not cancelled")
		}
	}, keystore.WithLease(testLease))
	if !errors.Is(cause, keystore.ErrLeaseLost) {
		t.Fatalf("cause %v, want ErrLeaseLost", cause)
	}
	if !errors.Is(err, keystore.ErrLeaseLost) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Do: %v, want fn's error joined with the lease loss", err)
	}
}

func TestKeepAliveStoreFailing(t *testing.T) {
	t.Parallel()
	s := newLeaseStore()
	s.FailExtend(errors.New("store unreachable"))
	c, _ := s.Reserve(context.Background(), "k", nil, testLease)
	start := time.Now()
	ctx, stop := keystore.KeepAlive(context.Background(), s, c, testLease)
	<-ctx.Done()
	if took := time.Since(start); took < testLease*9/10 {
		t.Fatalf("cancelled after %v, before nine tenths of the lease of %v: the holder gave up while its lease was good", took, testLease)
	}
	if cause := context.Cause(ctx); !errors.Is(cause, keystore.ErrLeaseNotRenewed) || !errors.Is(cause, keystore.ErrLeaseLost) {
		t.Fatalf("cause %v, want ErrLeaseNotRenewed (an ErrLeaseLost)", cause)
	}
	if _, err := stop(); !errors.Is(err, keystore.ErrLeaseLost) {
		t.Fatalf("stop: %v, want ErrLeaseLost", err)
	}
	if n := s.Extends.Load(); n < 2 {
		t.Fatalf("%d Extend calls, want retries while the lease lasted", n)
	}
}

func TestKeepAliveStop(t *testing.T) {
	t.Parallel()
	s := newLeaseStore()
	c, _ := s.Reserve(context.Background(), "k", nil, testLease)
	ctx, stop := keystore.KeepAlive(context.Background(), s, c, testLease)
	time.Sleep(2 * testLease)
	if ctx.Err() != nil {
		t.Fatalf("ctx ended while renewing: %v", context.Cause(ctx))
	}
	nc, err := stop()
	if err != nil || !nc.Expires.After(c.Expires) || nc.Token != c.Token {
		t.Fatalf("stop: %+v, %v; want the same token with a later Expires than %v", nc, err, c.Expires)
	}
	if ctx.Err() == nil {
		t.Fatal("stop did not cancel the context")
	}
	n := s.Extends.Load()
	time.Sleep(testLease)
	if m := s.Extends.Load(); m != n {
		t.Fatalf("%d renewals after stop", m-n)
	}
	if again, err := stop(); !again.Expires.Equal(nc.Expires) || err != nil {
		t.Fatalf("second stop: %+v, %v", again, err)
	}
	// The lease ends one lease after the last renewal.
	time.Sleep(testLease)
	if r, _ := s.Reserve(context.Background(), "k", nil, time.Minute); r.State != keystore.Acquired || !r.Takeover {
		t.Fatalf("after stop and a lease: %v (takeover %v), want a takeover", r.State, r.Takeover)
	}
}

func TestKeepAliveWithoutExtender(t *testing.T) {
	t.Parallel()
	s := noExtend{newLeaseStore()}
	if keystore.CanExtend(s) {
		t.Fatal("CanExtend true for a store without Extend")
	}
	c, _ := s.Reserve(context.Background(), "k", nil, testLease)
	ctx, stop := keystore.KeepAlive(context.Background(), s, c, testLease)
	time.Sleep(2 * testLease)
	if ctx.Err() != nil {
		t.Fatal("ctx ended without a store that renews: want today's behaviour, unbounded")
	}
	if nc, err := stop(); !nc.Expires.Equal(c.Expires) || nc.Token != c.Token || err != nil {
		t.Fatalf("stop: %+v, %v", nc, err)
	}
}

type wrapper struct {
	*storetest.RefStore
	inner keystore.Store
}

func (w wrapper) Unwrap() keystore.Store { return w.inner }

func TestCanExtendUnwraps(t *testing.T) {
	t.Parallel()
	if !keystore.CanExtend(newLeaseStore()) {
		t.Fatal("CanExtend false for an Extender")
	}
	if keystore.CanExtend(wrapper{newLeaseStore(), noExtend{newLeaseStore()}}) {
		t.Fatal("CanExtend true for a wrapper around a store that cannot renew")
	}
	if !keystore.CanExtend(wrapper{newLeaseStore(), newLeaseStore()}) {
		t.Fatal("CanExtend false for a wrapper around an Extender")
	}
}

// The same with a real store: SQLite renews by its own clock.
func TestDoRenewsLeaseSQLite(t *testing.T) {
	t.Parallel()
	s := dbtest.SQLiteStore(t, "")
	if !keystore.CanExtend(s) {
		t.Fatal("sqlitestore does not renew leases")
	}
	// A 2 s lease, not testLease: a renewal must land within nine tenths
	// of the lease, and an SQLite write beside four pollers under -race on
	// a loaded machine took longer than 170 ms (the test then failed at
	// load 13-21, before and after the Renewal refactor alike).
	runs, err := slowEffectLease(t, s, 2*time.Second)
	t.Logf("SQLite, with renewals: the effect ran %d time(s); first caller's error: %v", runs, err)
	if runs != 1 || err != nil {
		t.Fatalf("an effect 3.5x its lease ran %d times (first caller: %v), want once and no error", runs, err)
	}
	c, _ := s.Reserve(context.Background(), "slow", nil, time.Minute)
	if c.State != keystore.Done || string(c.Result) != "ok" {
		t.Fatalf("after Do: %v %q, want the stored result", c.State, c.Result)
	}
}
