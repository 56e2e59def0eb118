package storetest

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/keystore"
)

func testStateMachine(t *testing.T, s keystore.Store, _ config) {
	ctx := testCtx(t)
	key, fp := newKey("sm"), []byte("fp-1")
	before := time.Now()
	c := reserve(t, s, key, fp, long)
	wantState(t, c, keystore.Acquired)
	if c.Key != key || c.Takeover {
		t.Fatalf("first claim %+v: want key %q and no takeover", c, key)
	}
	if !near(c.Expires, before.Add(long), 5*time.Second) {
		t.Fatalf("lease expires %v, want about %v", c.Expires, before.Add(long))
	}

	held := reserve(t, s, key, fp, long)
	wantState(t, held, keystore.InProgress)
	if held.Result != nil || !near(held.Expires, c.Expires, 5*time.Millisecond) {
		t.Fatalf("in-progress claim %+v: want no result and the holder's lease end %v", held, c.Expires)
	}

	noErr(t, "Complete", s.Complete(ctx, c, []byte("result-1"), long))
	done := reserve(t, s, key, fp, long)
	wantState(t, done, keystore.Done)
	if string(done.Result) != "result-1" {
		t.Fatalf("done result %q, want %q", done.Result, "result-1")
	}
	if !near(done.Expires, time.Now().Add(long), 5*time.Second) {
		t.Fatalf("result expires %v, want about %v", done.Expires, time.Now().Add(long))
	}
	wantState(t, reserve(t, s, key, nil, long), keystore.Done)

	// Completing the same claim again is a no-op that keeps the first
	// result: a Complete retried after a lost reply must not fail.
	noErr(t, "second Complete of the same claim", s.Complete(ctx, c, []byte("result-2"), long))
	if r := reserve(t, s, key, fp, long); string(r.Result) != "result-1" {
		t.Fatalf("after a second Complete the result is %q, want the first, %q", r.Result, "result-1")
	}
	wantErr(t, "Release of a completed key", s.Release(ctx, c), keystore.ErrLeaseLost)
	wantState(t, reserve(t, s, key, fp, long), keystore.Done)
}

func testRelease(t *testing.T, s keystore.Store, _ config) {
	ctx := testCtx(t)
	key := newKey("rel")
	c1 := reserve(t, s, key, []byte("a"), long)
	wantState(t, c1, keystore.Acquired)
	noErr(t, "Release", s.Release(ctx, c1))

	// Absent again: the next Reserve acquires, with a higher token, and may
	// bring another fingerprint.
	c2 := reserve(t, s, key, []byte("b"), long)
	wantState(t, c2, keystore.Acquired)
	if c2.Token <= c1.Token || c2.Takeover {
		t.Fatalf("after Release: token %d (takeover %v), want above %d and no takeover", c2.Token, c2.Takeover, c1.Token)
	}
	wantErr(t, "Release with the released claim", s.Release(ctx, c1), keystore.ErrLeaseLost)
	wantErr(t, "Complete with the released claim", s.Complete(ctx, c1, []byte("x"), long), keystore.ErrLeaseLost)
	completeHeld(t, s, c2, "two")
}

func testStaleToken(t *testing.T, s keystore.Store, _ config) {
	ctx := testCtx(t)
	key := newKey("stale")
	c := reserve(t, s, key, nil, long)
	wantState(t, c, keystore.Acquired)
	for _, tok := range []uint64{c.Token + 1, c.Token + 1<<40} {
		forged := c
		forged.Token = tok
		wantErr(t, "Complete with a foreign token", s.Complete(ctx, forged, []byte("forged"), long), keystore.ErrLeaseLost)
		wantErr(t, "Release with a foreign token", s.Release(ctx, forged), keystore.ErrLeaseLost)
	}
	other := c
	other.Key = newKey("stale-other")
	wantErr(t, "Complete of an absent key", s.Complete(ctx, other, nil, long), keystore.ErrLeaseLost)
	wantErr(t, "Release of an absent key", s.Release(ctx, other), keystore.ErrLeaseLost)
	wantState(t, reserve(t, s, other.Key, nil, long), keystore.Acquired)

	// Nothing was written: the real holder still completes.
	completeHeld(t, s, c, "ok")
}

// testTakeover is the "holder stops between its effect and Complete" case:
// its lease expires, a new holder takes the key over with a higher token,
// and the old holder's late Complete and Release change nothing.
func testTakeover(t *testing.T, s keystore.Store, cfg config) {
	ctx := testCtx(t)
	key := newKey("takeover")
	old := reserve(t, s, key, []byte("fp-old"), cfg.unit)
	wantState(t, old, keystore.Acquired)
	time.Sleep(cfg.unit * 5 / 2)

	cur := reserve(t, s, key, []byte("fp-new"), long)
	wantState(t, cur, keystore.Acquired)
	if cur.Token <= old.Token {
		t.Fatalf("takeover token %d, want above the old %d", cur.Token, old.Token)
	}
	if !cur.Takeover {
		t.Fatalf("claim over an expired lease reports Takeover false")
	}
	wantErr(t, "late Complete by the old holder", s.Complete(ctx, old, []byte("old"), long), keystore.ErrLeaseLost)
	wantErr(t, "late Release by the old holder", s.Release(ctx, old), keystore.ErrLeaseLost)
	wantState(t, reserve(t, s, key, []byte("fp-new"), long), keystore.InProgress)
	noErr(t, "Complete by the new holder", s.Complete(ctx, cur, []byte("new"), long))
	r := reserve(t, s, key, []byte("fp-new"), long)
	if r.State != keystore.Done || string(r.Result) != "new" {
		t.Fatalf("after takeover: %+v, want done with %q", r, "new")
	}
	_, err := s.Reserve(ctx, key, []byte("fp-old"), long)
	wantErr(t, "Reserve with the old holder's fingerprint", err, idem.ErrFingerprintMismatch)
}

// testLateComplete: a lease expired but nobody took the key over. Complete
// may succeed (no one else can have started) or report ErrLeaseLost (the
// store already dropped the lease); either way the key is consistent.
func testLateComplete(t *testing.T, s keystore.Store, cfg config) {
	ctx := testCtx(t)
	key := newKey("late")
	c := reserve(t, s, key, nil, cfg.unit)
	time.Sleep(cfg.unit * 5 / 2)
	err := s.Complete(ctx, c, []byte("late"), long)
	r := reserve(t, s, key, nil, long)
	switch {
	case err == nil:
		if r.State != keystore.Done || string(r.Result) != "late" {
			t.Fatalf("late Complete succeeded but Reserve gives %+v", r)
		}
	case errors.Is(err, keystore.ErrLeaseLost):
		wantState(t, r, keystore.Acquired)
	default:
		t.Fatalf("late Complete: %v", err)
	}
}

func testResultExpiry(t *testing.T, s keystore.Store, cfg config) {
	ctx := testCtx(t)
	key := newKey("ttl")
	c := reserve(t, s, key, []byte("a"), long)
	noErr(t, "Complete", s.Complete(ctx, c, []byte("r"), cfg.unit))
	time.Sleep(cfg.unit * 5 / 2)
	// The TTL ran from completion; after it the key is absent again, for
	// any fingerprint, and a completed key is not a takeover.
	n := reserve(t, s, key, []byte("b"), long)
	wantState(t, n, keystore.Acquired)
	if n.Token <= c.Token || n.Takeover {
		t.Fatalf("after expiry: token %d takeover %v, want above %d and false", n.Token, n.Takeover, c.Token)
	}
	if n.Result != nil {
		t.Fatalf("acquired claim carries result %q", n.Result)
	}
	wantErr(t, "Complete with the expired claim", s.Complete(ctx, c, []byte("x"), long), keystore.ErrLeaseLost)
}

func testFingerprint(t *testing.T, s keystore.Store, _ config) {
	ctx := testCtx(t)
	key := newKey("fp")
	a, b := []byte("fingerprint-a"), []byte("fingerprint-b")
	c := reserve(t, s, key, a, long)
	_, err := s.Reserve(ctx, key, b, long)
	wantErr(t, "Reserve in progress with another fingerprint", err, idem.ErrFingerprintMismatch)
	wantState(t, reserve(t, s, key, nil, long), keystore.InProgress)
	noErr(t, "Complete", s.Complete(ctx, c, []byte("res"), long))
	_, err = s.Reserve(ctx, key, b, long)
	wantErr(t, "Reserve done with another fingerprint", err, idem.ErrFingerprintMismatch)
	if r := reserve(t, s, key, a, long); r.State != keystore.Done || string(r.Result) != "res" {
		t.Fatalf("after a mismatch the key is %+v, want done with %q", r, "res")
	}

	// A key stored without a fingerprint is not checked.
	key2 := newKey("fp-none")
	c2 := reserve(t, s, key2, nil, long)
	wantState(t, reserve(t, s, key2, a, long), keystore.InProgress)
	noErr(t, "Complete", s.Complete(ctx, c2, nil, long))
	wantState(t, reserve(t, s, key2, b, long), keystore.Done)
}

func testBadInput(t *testing.T, s keystore.Store, _ config) {
	ctx := testCtx(t)
	key := newKey("bad")
	for _, tc := range []struct {
		name  string
		key   string
		fp    []byte
		lease time.Duration
		want  error
	}{
		{"empty key", "", nil, long, idem.ErrInvalidKey},
		{"256-byte key", strings.Repeat("k", 256), nil, long, idem.ErrInvalidKey},
		{"key of invalid UTF-8", key + "\xff", nil, long, idem.ErrInvalidKey},
		{"key with a truncated rune", key + "\xe2\x82", nil, long, idem.ErrInvalidKey},
		{"key with NUL", key + "\x00", nil, long, idem.ErrInvalidKey},
		{"key of one NUL", "\x00", nil, long, idem.ErrInvalidKey},
		{"zero lease", key, nil, 0, idem.ErrInvalidArgument},
		{"negative lease", key, nil, -time.Second, idem.ErrInvalidArgument},
		{"oversized fingerprint", key, make([]byte, idem.MaxFingerprintLen+1), long, idem.ErrInvalidArgument},
	} {
		_, err := s.Reserve(ctx, tc.key, tc.fp, tc.lease)
		wantErr(t, "Reserve with "+tc.name, err, tc.want)
	}
	// Nothing was written by the rejected calls: not the key they share a
	// prefix with, nor a key that a store might have derived by dropping
	// or replacing the bad bytes.
	for _, k := range []string{key + "\ufffd", key + "\ufffd\ufffd"} {
		wantState(t, reserve(t, s, k, nil, long), keystore.Acquired)
	}
	c := reserve(t, s, key, nil, long)
	wantState(t, c, keystore.Acquired)
	longest := strings.Repeat("k", 255)
	wantState(t, reserve(t, s, longest, nil, long), keystore.Acquired)

	limit := maxResult(s)
	wantErr(t, "Complete with zero ttl", s.Complete(ctx, c, nil, 0), idem.ErrInvalidArgument)
	wantErr(t, "Complete with a result over the limit", s.Complete(ctx, c, make([]byte, limit+1), long), keystore.ErrResultTooLarge)
	for _, bad := range []keystore.Claim{
		{Key: key, State: keystore.InProgress, Token: c.Token},
		{Key: key, State: keystore.Done, Token: c.Token},
		{Key: key, State: keystore.Acquired},
		{Key: "", State: keystore.Acquired, Token: c.Token},
		{Key: key + "\xff", State: keystore.Acquired, Token: c.Token},
		{Key: key + "\x00", State: keystore.Acquired, Token: c.Token},
	} {
		err := s.Complete(ctx, bad, nil, long)
		if !errors.Is(err, idem.ErrInvalidArgument) && !errors.Is(err, idem.ErrInvalidKey) {
			t.Fatalf("Complete(%+v): %v, want ErrInvalidArgument or ErrInvalidKey", bad, err)
		}
		err = s.Release(ctx, bad)
		if !errors.Is(err, idem.ErrInvalidArgument) && !errors.Is(err, idem.ErrInvalidKey) {
			t.Fatalf("Release(%+v): %v, want ErrInvalidArgument or ErrInvalidKey", bad, err)
		}
	}
	// The rejected Completes left the key in progress under c, which can
	// still give it back, so a retry is never blocked.
	wantState(t, reserve(t, s, key, nil, long), keystore.InProgress)
	noErr(t, "Release after rejected Completes", s.Release(ctx, c))
	c = reserve(t, s, key, nil, long)
	wantState(t, c, keystore.Acquired)

	// A result of exactly the limit is stored whole.
	big := bytes.Repeat([]byte("0123456789abcdef"), limit/16+1)[:limit]
	noErr(t, "Complete with a result at the limit", s.Complete(ctx, c, big, long))
	if r := reserve(t, s, key, nil, long); !bytes.Equal(r.Result, big) {
		t.Fatalf("result at the limit came back as %d bytes, want %d", len(r.Result), len(big))
	}
}

func testBinary(t *testing.T, s keystore.Store, _ config) {
	ctx := testCtx(t)
	// Keys are UTF-8 without NUL (idem.ValidateKey); within that rule any
	// character goes, including the ones stores use as separators.
	key := newKey("bin\n\t {x}:\x01\x7f é\u2028🙂")
	fp := []byte{0, 1, 2, 0xff, 0}
	result := []byte{0, 0xfe, '\n', 0, 'x'}
	c := reserve(t, s, key, fp, long)
	wantState(t, c, keystore.Acquired)
	noErr(t, "Complete", s.Complete(ctx, c, result, long))
	r := reserve(t, s, key, fp, long)
	if r.State != keystore.Done || !bytes.Equal(r.Result, result) || r.Key != key {
		t.Fatalf("binary key/result came back as %+v", r)
	}
	_, err := s.Reserve(ctx, key, []byte{0, 1, 2, 0xff, 1}, long)
	wantErr(t, "binary fingerprint differing in the last byte", err, idem.ErrFingerprintMismatch)

	// An empty result is stored as empty.
	k2 := newKey("empty")
	c2 := reserve(t, s, k2, nil, long)
	noErr(t, "Complete with nil result", s.Complete(ctx, c2, nil, long))
	if r := reserve(t, s, k2, nil, long); r.State != keystore.Done || len(r.Result) != 0 {
		t.Fatalf("empty result came back as %+v", r)
	}
}

func testCancelled(t *testing.T, s keystore.Store, _ config) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	key := newKey("cancel")
	_, err := s.Reserve(ctx, key, nil, long)
	wantErr(t, "Reserve with a cancelled context", err, context.Canceled)
	// Fail closed, and nothing held: the key is free.
	c := reserve(t, s, key, nil, long)
	wantState(t, c, keystore.Acquired)

	// A Complete or Release that starts under a cancelled ctx writes
	// nothing: the key stays in progress under c, which still releases it.
	wantErr(t, "Complete with a cancelled context", s.Complete(ctx, c, []byte("x"), long), context.Canceled)
	wantErr(t, "Release with a cancelled context", s.Release(ctx, c), context.Canceled)
	wantState(t, reserve(t, s, key, nil, long), keystore.InProgress)
	noErr(t, "Release", s.Release(testCtx(t), c))
	wantState(t, reserve(t, s, key, nil, long), keystore.Acquired)
}

// testClose: a store with a Close method (memstore, the SQL stores) refuses
// every call after it, on its scoped views too, with idem.ErrClosed; a
// second Close returns nil.
func testClose(t *testing.T, s keystore.Store, _ config) {
	cl, ok := s.(interface{ Close() error })
	if !ok {
		t.Skip("the store has no Close")
	}
	ctx := testCtx(t)
	view, err := keystore.Scope(s, "closed-view")
	if errors.Is(err, errors.ErrUnsupported) {
		view = s
	} else {
		noErr(t, "Scope", err)
	}
	c := reserve(t, s, newKey("close"), nil, long)
	noErr(t, "Close", cl.Close())
	noErr(t, "second Close", cl.Close())
	_, err = s.Reserve(ctx, c.Key, nil, long)
	wantErr(t, "Reserve after Close", err, idem.ErrClosed)
	_, err = view.Reserve(ctx, c.Key, nil, long)
	wantErr(t, "Reserve on a view after Close", err, idem.ErrClosed)
	wantErr(t, "Complete after Close", s.Complete(ctx, c, nil, long), idem.ErrClosed)
	wantErr(t, "Release after Close", s.Release(ctx, c), idem.ErrClosed)
	if sw, ok := s.(keystore.Sweeper); ok {
		_, err = sw.Sweep(ctx, 10)
		wantErr(t, "Sweep after Close", err, idem.ErrClosed)
	}
}

// completeHeld checks that c's key is in progress, completes c with result
// and checks that the key then answers that result.
func completeHeld(t *testing.T, s keystore.Store, c keystore.Claim, result string) {
	t.Helper()
	wantState(t, reserve(t, s, c.Key, nil, long), keystore.InProgress)
	noErr(t, "Complete by the holder", s.Complete(testCtx(t), c, []byte(result), long))
	if r := reserve(t, s, c.Key, nil, long); r.State != keystore.Done || string(r.Result) != result {
		t.Fatalf("after Complete: %+v, want done with %q", r, result)
	}
}
