// Package storetest is the conformance suite for [keystore.Store]
// implementations. Every store in idem runs it, and a store written outside
// idem should too:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) keystore.Store {
//			s, err := mystore.New(...)
//			if err != nil {
//				t.Fatal(err)
//			}
//			return s
//		})
//	}
//
// The suite checks the state machine (absent → in progress → done, Release
// back to absent), fencing (a stale token writes nothing and gets
// ErrLeaseLost), lease expiry and takeover with a higher token, result
// expiry, fingerprints, input validation, 64 concurrent reservations of one
// key, [keystore.Do], [keystore.Extender], which every store must implement
// (fenced renewal, and Do running an effect three times longer than its
// lease once among concurrent retriers; a store without it fails), the
// optional [keystore.Scoper], [keystore.Sweeper], [keystore.Inspector] and
// [keystore.Forgetter] interfaces (with an operator's fenced release by key
// and token; a store without one is reported with t.Log), the optional
// [keystore.Notifier] (waiters of several keys, asleep for a poll interval
// far longer than the test, answered soon after each Complete or Release;
// reported with t.Log when absent), and finally the
// linearizability of random concurrent
// histories against a sequential model of the state machine, with
// github.com/anishathalye/porcupine.
//
// Expiry is tested with real time: leases and TTLs of [WithTimeUnit] (100
// ms by default) and sleeps of a few units, so the store's own clock is what
// is tested. Checks that a lease is still live use leases of minutes, so a
// slow machine cannot make them flaky. Subtests run in parallel and call
// newStore once each; newStore should return a store that shares nothing
// with the others (its own schema, table or key prefix), and register its
// cleanup with t.Cleanup.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idem-go/idem/keystore"
)

// Option configures [Run]. A bad one fails the test before any check runs.
type Option func(*config) error

type config struct {
	unit time.Duration
	ops  int // random operations of the linearizability check
}

// WithTimeUnit sets the short lease and TTL used by the expiry tests
// (default 100 ms); the tests sleep 2.5 units for them to expire. Raise it
// for a store whose clock is coarse.
func WithTimeUnit(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("storetest: time unit %v is not positive", d)
		}
		c.unit = d
		return nil
	}
}

// long is the lease or TTL of checks that need a key to stay live.
const long = 10 * time.Minute

// Run runs the conformance suite against stores made by newStore.
func Run(t *testing.T, newStore func(t *testing.T) keystore.Store, opts ...Option) {
	cfg := config{unit: 100 * time.Millisecond, ops: 1200}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, s keystore.Store, cfg config)
	}{
		{"StateMachine", testStateMachine},
		{"ReleaseReturnsToAbsent", testRelease},
		{"StaleTokenWritesNothing", testStaleToken},
		{"LeaseExpiryTakeover", testTakeover},
		{"LateCompleteBeforeTakeover", testLateComplete},
		{"ResultExpiry", testResultExpiry},
		{"Fingerprint", testFingerprint},
		{"BadInput", testBadInput},
		{"BinaryKeysAndResults", testBinary},
		{"HugeLease", testHugeLease},
		{"HugeTTL", testHugeTTL},
		{"TinyLeaseAndTTL", testTinyDurations},
		{"FingerprintAtLimit", testFingerprintAtLimit},
		{"CancelledContext", testCancelled},
		{"CancelMidCall", testCancelMidCall},
		{"DoCancelled", testDoCancelled},
		{"ConcurrentReserve", testConcurrentReserve},
		{"Do", testDo},
		{"Scopes", testScopes},
		{"Sweep", testSweep},
		{"Extend", testExtend},
		{"Inspect", testInspect},
		{"Notify", testNotify},
		{"Linearizability", testLinearizability},
		{"Close", testClose},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newStore(t), cfg)
		})
	}
}

// newKey returns a key no other test uses.
func newKey(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// testCtx is a check's context: a guard against a hung store, not a
// bound on its speed. It ends 5 minutes from now, or 30 s before the test
// binary's -timeout if that comes first (so a hung store fails the check
// with an error instead of panicking the binary). A fixed 60 s was a
// speed bound in disguise: PostgreSQL's CancelMidCall (3000 keys under
// cancelled contexts, in parallel with the other checks on one store) and
// Extend exceeded it at load 17-19 without anything being wrong.
func testCtx(t *testing.T) context.Context {
	guard := 5 * time.Minute
	if d, ok := t.Deadline(); ok {
		guard = max(min(guard, time.Until(d)-30*time.Second), 10*time.Second)
	}
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	t.Cleanup(cancel)
	return ctx
}

// reserve calls Reserve and fails the test on error.
func reserve(t *testing.T, s keystore.Store, key string, fp []byte, lease time.Duration) keystore.Claim {
	t.Helper()
	c, err := s.Reserve(testCtx(t), key, fp, lease)
	if err != nil {
		t.Fatalf("Reserve(%q): %v", key, err)
	}
	return c
}

func wantState(t *testing.T, c keystore.Claim, want keystore.State) {
	t.Helper()
	if c.State != want {
		t.Fatalf("claim on %q is %v, want %v (claim %+v)", c.Key, c.State, want, c)
	}
	switch want {
	case keystore.Acquired:
		if c.Token == 0 {
			t.Fatalf("acquired claim on %q has token 0", c.Key)
		}
	default:
		if c.Token != 0 {
			t.Fatalf("%v claim on %q has token %d; tokens belong to acquired claims only", want, c.Key, c.Token)
		}
	}
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: error %v, want one matching %v", what, err, target)
	}
}

func noErr(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// wantDo checks the outcome of one Do: no error, the result want, and
// replayed as wantReplayed.
func wantDo(t *testing.T, what string, res []byte, replayed bool, err error, want string, wantReplayed bool) {
	t.Helper()
	noErr(t, what, err)
	if string(res) != want || replayed != wantReplayed {
		t.Fatalf("%s: %q replayed=%v, want %q replayed=%v", what, res, replayed, want, wantReplayed)
	}
}

// mustNotRun is the fn of a Do on a key another holder has in progress.
func mustNotRun(t *testing.T) func(context.Context) ([]byte, error) {
	return func(context.Context) ([]byte, error) {
		t.Error("fn ran while the key was in progress")
		return nil, nil
	}
}

// near reports whether a and b are within d of each other.
func near(a, b time.Time, d time.Duration) bool {
	diff := a.Sub(b)
	return diff <= d && diff >= -d
}

// maxResult is the store's result limit, if it tells, or the default.
func maxResult(s keystore.Store) int {
	if m, ok := s.(interface{ MaxResultSize() int }); ok {
		return m.MaxResultSize()
	}
	return keystore.DefaultMaxResultSize
}
