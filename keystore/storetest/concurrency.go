package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/together"
	"github.com/idem-go/idem/keystore"
)

func testConcurrentReserve(t *testing.T, s keystore.Store, _ config) {
	ctx := testCtx(t)
	key := newKey("race")
	const n = 64
	var acquired, inProgress atomic.Int32
	for _, err := range atOnce(n, func() error {
		c, err := s.Reserve(ctx, key, []byte("fp"), long)
		switch {
		case err != nil:
			return err
		case c.State == keystore.Acquired:
			acquired.Add(1)
		case c.State == keystore.InProgress:
			inProgress.Add(1)
		default:
			return errors.New("unexpected state " + c.State.String())
		}
		return nil
	}) {
		t.Errorf("concurrent Reserve: %v", err)
	}
	if acquired.Load() != 1 || inProgress.Load() != n-1 {
		t.Fatalf("%d concurrent Reserves: %d acquired, %d in progress; want exactly 1 and %d", n, acquired.Load(), inProgress.Load(), n-1)
	}
}

var errBoom = errors.New("storetest: effect failed")

func testDo(t *testing.T, s keystore.Store, cfg config) {
	t.Run("OnceUnderConcurrency", func(t *testing.T) {
		t.Parallel()
		ctx := testCtx(t)
		key := newKey("do-once")
		const n = 32
		var calls, replays atomic.Int32
		for _, err := range atOnce(n, func() error {
			res, replayed, err := keystore.Do(ctx, s, key, []byte("card-1"), func(ctx context.Context) ([]byte, error) {
				calls.Add(1)
				time.Sleep(20 * time.Millisecond) // the call to the payment provider
				return []byte("charge-42"), nil
			}, keystore.WithLease(long), keystore.WithWait(time.Millisecond, 20*time.Millisecond))
			switch {
			case err != nil:
				return err
			case string(res) != "charge-42":
				return errors.New("wrong result " + string(res))
			case replayed:
				replays.Add(1)
			}
			return nil
		}) {
			t.Errorf("Do: %v", err)
		}
		if calls.Load() != 1 || replays.Load() != n-1 {
			t.Fatalf("%d concurrent Do: fn ran %d times, %d replays; want 1 and %d", n, calls.Load(), replays.Load(), n-1)
		}
	})
	t.Run("Replay", func(t *testing.T) {
		t.Parallel()
		ctx := testCtx(t)
		key := newKey("do-replay")
		calls := 0
		fn := func(ctx context.Context) ([]byte, error) {
			calls++
			c, ok := keystore.ClaimFrom(ctx)
			if !ok || c.State != keystore.Acquired || c.Key != key || c.Token == 0 {
				t.Errorf("fn sees claim %+v (%v)", c, ok)
			}
			return []byte("sent"), nil
		}
		for i, wantReplayed := range []bool{false, true, true} {
			res, replayed, err := keystore.Do(ctx, s, key, nil, fn)
			wantDo(t, fmt.Sprintf("Do #%d", i+1), res, replayed, err, "sent", wantReplayed)
		}
		if calls != 1 {
			t.Fatalf("fn ran %d times, want 1", calls)
		}
	})
	t.Run("ReleaseOnError", func(t *testing.T) {
		t.Parallel()
		ctx := testCtx(t)
		key := newKey("do-err")
		_, _, err := keystore.Do(ctx, s, key, nil, func(context.Context) ([]byte, error) { return nil, errBoom })
		wantErr(t, "Do with a failing fn", err, errBoom)
		// Released: the retry runs fn at once.
		res, replayed, err := keystore.Do(ctx, s, key, nil, func(context.Context) ([]byte, error) { return []byte("second"), nil })
		wantDo(t, "retry", res, replayed, err, "second", false)
	})
	t.Run("ReleaseOnPanic", func(t *testing.T) {
		t.Parallel()
		ctx := testCtx(t)
		key := newKey("do-panic")
		func() {
			defer func() {
				if recover() == nil {
					t.Error("panic in fn did not reach the caller")
				}
			}()
			_, _, _ = keystore.Do(ctx, s, key, nil, func(context.Context) ([]byte, error) { panic("boom") })
		}()
		wantState(t, reserve(t, s, key, nil, long), keystore.Acquired)
	})
	t.Run("FailFast", func(t *testing.T) {
		t.Parallel()
		ctx := testCtx(t)
		key := newKey("do-busy")
		held := reserve(t, s, key, nil, long)
		_, _, err := keystore.Do(ctx, s, key, nil, mustNotRun(t))
		wantErr(t, "Do on a held key", err, keystore.ErrInProgress)
		var ipe *keystore.InProgressError
		if !errors.As(err, &ipe) || ipe.Key != key || !near(ipe.Expires, held.Expires, 5*time.Millisecond) {
			t.Fatalf("Do on a held key: %v, want *InProgressError with the lease end %v", err, held.Expires)
		}
	})
	t.Run("WaitEndsWithContext", func(t *testing.T) {
		t.Parallel()
		key := newKey("do-wait-ctx")
		reserve(t, s, key, nil, long)
		ctx, cancel := context.WithTimeout(testCtx(t), cfg.unit)
		defer cancel()
		_, _, err := keystore.Do(ctx, s, key, nil, mustNotRun(t), keystore.WithWait(time.Millisecond, 10*time.Millisecond))
		wantErr(t, "waiting Do", err, keystore.ErrInProgress)
		wantErr(t, "waiting Do", err, context.DeadlineExceeded)
	})
	t.Run("WaitThenTakeOver", func(t *testing.T) {
		t.Parallel()
		ctx := testCtx(t)
		key := newKey("do-wait-takeover")
		old := reserve(t, s, key, nil, cfg.unit) // a holder that died
		res, replayed, err := keystore.Do(ctx, s, key, nil, func(ctx context.Context) ([]byte, error) {
			c, _ := keystore.ClaimFrom(ctx)
			if c.Token <= old.Token || !c.Takeover {
				t.Errorf("fn runs under %+v, want a takeover with a token above %d", c, old.Token)
			}
			return []byte("mine"), nil
		}, keystore.WithWait(5*time.Millisecond, 20*time.Millisecond))
		wantDo(t, "Do after takeover", res, replayed, err, "mine", false)
	})
	t.Run("Mismatch", func(t *testing.T) {
		t.Parallel()
		ctx := testCtx(t)
		key := newKey("do-fp")
		ok := func(context.Context) ([]byte, error) { return []byte("r"), nil }
		_, _, err := keystore.Do(ctx, s, key, []byte("a"), ok)
		noErr(t, "Do", err)
		_, _, err = keystore.Do(ctx, s, key, []byte("b"), ok)
		wantErr(t, "Do with another fingerprint", err, idem.ErrFingerprintMismatch)
	})
	t.Run("InvalidOptions", func(t *testing.T) {
		t.Parallel()
		ctx := testCtx(t)
		for _, o := range []keystore.Option{
			keystore.WithLease(0), keystore.WithTTL(-1),
			keystore.WithWait(0, time.Second), keystore.WithWait(time.Second, time.Millisecond),
		} {
			_, _, err := keystore.Do(ctx, s, newKey("do-opt"), nil, func(context.Context) ([]byte, error) {
				t.Error("fn ran with an invalid option")
				return nil, nil
			}, o)
			wantErr(t, "Do with an invalid option", err, idem.ErrInvalidOption)
		}
	})
}

func testScopes(t *testing.T, s keystore.Store, _ config) {
	if _, ok := s.(keystore.Scoper); !ok {
		t.Skipf("%T does not implement keystore.Scoper", s)
	}
	ctx := testCtx(t)
	a, err := keystore.Scope(s, "tenant-a")
	noErr(t, "Scope", err)
	b, err := keystore.Scope(s, "tenant-b")
	noErr(t, "Scope", err)
	key := newKey("scoped")
	ca := reserve(t, a, key, []byte("fa"), long)
	cb := reserve(t, b, key, []byte("fb"), long) // no mismatch across scopes
	wantState(t, ca, keystore.Acquired)
	wantState(t, cb, keystore.Acquired)
	noErr(t, "Complete in a", a.Complete(ctx, ca, []byte("A"), long))
	wantState(t, reserve(t, b, key, []byte("fb"), long), keystore.InProgress)
	noErr(t, "Complete in b", b.Complete(ctx, cb, []byte("B"), long))
	if r := reserve(t, a, key, nil, long); string(r.Result) != "A" {
		t.Fatalf("scope a reads %q, want %q", r.Result, "A")
	}
	if r := reserve(t, b, key, nil, long); string(r.Result) != "B" {
		t.Fatalf("scope b reads %q, want %q", r.Result, "B")
	}
	wantState(t, reserve(t, s, key, nil, long), keystore.Acquired) // the default scope is a third one

	// The store itself is the view of DefaultScope.
	key2 := newKey("default-scope")
	reserve(t, s, key2, nil, long)
	d, err := keystore.Scope(s, keystore.DefaultScope)
	noErr(t, "Scope(DefaultScope)", err)
	wantState(t, reserve(t, d, key2, nil, long), keystore.InProgress)

	for _, bad := range []string{"", "a{b", "a}b", "a\x00b", string(make([]byte, keystore.MaxScopeLen+1))} {
		_, err := keystore.Scope(s, bad)
		wantErr(t, "Scope("+bad+")", err, idem.ErrInvalidArgument)
	}
}

func testSweep(t *testing.T, s keystore.Store, cfg config) {
	sw, ok := s.(keystore.Sweeper)
	if !ok {
		t.Skipf("%T does not implement keystore.Sweeper", s)
	}
	ctx := testCtx(t)
	_, err := sw.Sweep(ctx, 0)
	wantErr(t, "Sweep with batch 0", err, idem.ErrInvalidArgument)

	var expired []keystore.Claim
	for i := range 3 {
		c := reserve(t, s, newKey("sweep-lease"), nil, cfg.unit)
		if i == 0 {
			noErr(t, "Complete", s.Complete(ctx, c, []byte("r"), cfg.unit))
		}
		expired = append(expired, c)
	}
	live := reserve(t, s, newKey("sweep-live"), nil, long)
	liveDone := reserve(t, s, newKey("sweep-live-done"), nil, long)
	noErr(t, "Complete", s.Complete(ctx, liveDone, []byte("kept"), long))
	time.Sleep(cfg.unit * 5 / 2)

	n, err := sw.Sweep(ctx, 1) // batch 1: several batches
	noErr(t, "Sweep", err)
	if n != len(expired) {
		t.Fatalf("Sweep deleted %d keys, want %d", n, len(expired))
	}
	if n, err = sw.Sweep(ctx, 100); err != nil || n != 0 {
		t.Fatalf("second Sweep: %d, %v; want 0, nil", n, err)
	}
	for _, c := range expired {
		wantErr(t, "Complete after the sweep", s.Complete(ctx, c, nil, long), keystore.ErrLeaseLost)
		n := reserve(t, s, c.Key, nil, long)
		wantState(t, n, keystore.Acquired)
		if n.Token <= c.Token {
			t.Fatalf("token after sweep %d, want above %d", n.Token, c.Token)
		}
	}
	wantState(t, reserve(t, s, live.Key, nil, long), keystore.InProgress)
	if r := reserve(t, s, liveDone.Key, nil, long); string(r.Result) != "kept" {
		t.Fatalf("live result after sweep: %+v", r)
	}
}

// atOnce runs f on n goroutines released at once and returns the errors
// they returned.
func atOnce(n int, f func() error) []error {
	errs := make([]error, n)
	together.Run(n, func(i int) { errs[i] = f() })
	return slices.DeleteFunc(errs, func(err error) bool { return err == nil })
}
