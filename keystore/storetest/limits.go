package storetest

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/keystore"
)

// farFuture is how far ahead a lease or TTL at the cap must end at least:
// "practically forever", whatever the store's rounding.
const farFuture = keystore.MaxDuration - 24*time.Hour

// capped reports whether exp is about keystore.MaxDuration from now: not
// earlier than farFuture (an overflow, or a cap lower than documented) and
// not later than the cap plus the slack of a slow test.
func capped(exp time.Time) bool {
	now := time.Now()
	return !exp.Before(now.Add(farFuture)) && !exp.After(now.Add(keystore.MaxDuration+time.Hour))
}

// hugeDurations are leases and TTLs at and around [keystore.MaxDuration]:
// every one of them must mean "practically forever", never "already
// expired" (an overflow) and never a store error (an interval or PX out of
// range).
var hugeDurations = []time.Duration{
	keystore.MaxDuration - 1,
	keystore.MaxDuration,
	keystore.MaxDuration + 1,
	2 * keystore.MaxDuration,
	time.Duration(math.MaxInt64 / 2),
	time.Duration(math.MaxInt64 - 1),
	time.Duration(math.MaxInt64),
}

// testHugeLease: a lease of up to math.MaxInt64 is held, by the store's
// clock, until about now + keystore.MaxDuration; a second caller finds it
// in progress instead of acquiring it (a doubled effect).
func testHugeLease(t *testing.T, s keystore.Store, _ config) {
	ctx := testCtx(t)
	for _, d := range hugeDurations {
		key := newKey(fmt.Sprintf("huge-lease-%d", int64(d)))
		c, err := s.Reserve(ctx, key, nil, d)
		noErr(t, fmt.Sprintf("Reserve with lease %d", int64(d)), err)
		wantState(t, c, keystore.Acquired)
		if !capped(c.Expires) {
			t.Fatalf("lease %d ends %v: want about keystore.MaxDuration from now (the documented cap)", int64(d), c.Expires)
		}
		held := reserve(t, s, key, nil, time.Second)
		wantState(t, held, keystore.InProgress)
		if !near(held.Expires, c.Expires, time.Millisecond) {
			t.Fatalf("lease %d: holder's claim ends %v, the in-progress answer %v", int64(d), c.Expires, held.Expires)
		}
		noErr(t, "Release of a huge lease", s.Release(ctx, c))
		wantState(t, reserve(t, s, key, nil, long), keystore.Acquired)
	}
}

// testHugeTTL: a result kept for up to math.MaxInt64 is replayed, and its
// Expires is about now + keystore.MaxDuration.
func testHugeTTL(t *testing.T, s keystore.Store, _ config) {
	ctx := testCtx(t)
	for _, d := range hugeDurations {
		key := newKey(fmt.Sprintf("huge-ttl-%d", int64(d)))
		c := reserve(t, s, key, nil, long)
		wantState(t, c, keystore.Acquired)
		noErr(t, fmt.Sprintf("Complete with ttl %d", int64(d)), s.Complete(ctx, c, []byte("kept"), d))
		r := reserve(t, s, key, nil, long)
		wantState(t, r, keystore.Done)
		if string(r.Result) != "kept" || !capped(r.Expires) {
			t.Fatalf("ttl %d: replay %q expiring %v, want %q kept for about keystore.MaxDuration (the documented cap)", int64(d), r.Result, r.Expires, "kept")
		}
		// Completing again is still the no-op that keeps the first result.
		noErr(t, "second Complete with a huge ttl", s.Complete(ctx, c, []byte("other"), d))
		if r := reserve(t, s, key, nil, long); string(r.Result) != "kept" {
			t.Fatalf("ttl %d: after a second Complete the result is %q", int64(d), r.Result)
		}
	}
	// Do with the largest lease and TTL runs fn once and replays it.
	key := newKey("huge-do")
	calls := 0
	for i := range 3 {
		res, replayed, err := keystore.Do(ctx, s, key, nil, func(context.Context) ([]byte, error) {
			calls++
			return []byte("once"), nil
		}, keystore.WithLease(math.MaxInt64), keystore.WithTTL(math.MaxInt64))
		wantDo(t, fmt.Sprintf("Do #%d with the largest lease and TTL", i+1), res, replayed, err, "once", i > 0)
	}
	if calls != 1 {
		t.Fatalf("Do with the largest lease and TTL ran fn %d times, want 1", calls)
	}
}

// testTinyDurations: a lease or TTL of 1 ns is valid and acquires; it ends
// within the store's resolution, after which the key is taken over (lease)
// or reserved afresh (TTL), with a higher token, and the stale claim writes
// nothing.
func testTinyDurations(t *testing.T, s keystore.Store, cfg config) {
	ctx := testCtx(t)
	key := newKey("tiny-lease")
	before := time.Now()
	c := reserve(t, s, key, nil, time.Nanosecond)
	wantState(t, c, keystore.Acquired)
	if c.Expires.Before(before.Add(-5*time.Second)) || c.Expires.After(time.Now().Add(5*time.Second)) {
		t.Fatalf("1 ns lease ends %v, want about now (%v)", c.Expires, before)
	}
	time.Sleep(cfg.unit * 5 / 2)
	n := reserve(t, s, key, nil, long)
	wantState(t, n, keystore.Acquired)
	if n.Token <= c.Token {
		t.Fatalf("after a 1 ns lease: token %d, want above %d", n.Token, c.Token)
	}
	wantErr(t, "Complete by the 1 ns holder after the takeover", s.Complete(ctx, c, []byte("x"), long), keystore.ErrLeaseLost)

	noErr(t, "Complete with a 1 ns ttl", s.Complete(ctx, n, []byte("brief"), time.Nanosecond))
	time.Sleep(cfg.unit * 5 / 2)
	a := reserve(t, s, key, nil, long)
	wantState(t, a, keystore.Acquired)
	if a.Token <= n.Token || a.Takeover {
		t.Fatalf("after a 1 ns ttl: token %d takeover %v, want above %d and false", a.Token, a.Takeover, n.Token)
	}
}

// testFingerprintAtLimit: a fingerprint of exactly idem.MaxFingerprintLen
// bytes is stored whole: one differing only in its last byte conflicts.
func testFingerprintAtLimit(t *testing.T, s keystore.Store, _ config) {
	ctx := testCtx(t)
	key := newKey("fp-limit")
	fp := bytes.Repeat([]byte{0xff, 0, 'f'}, idem.MaxFingerprintLen)[:idem.MaxFingerprintLen]
	c := reserve(t, s, key, fp, long)
	wantState(t, c, keystore.Acquired)
	other := bytes.Clone(fp)
	other[len(other)-1] ^= 1
	_, err := s.Reserve(ctx, key, other, long)
	wantErr(t, "Reserve with a fingerprint differing in its last byte", err, idem.ErrFingerprintMismatch)
	wantState(t, reserve(t, s, key, fp, long), keystore.InProgress)
	noErr(t, "Complete", s.Complete(ctx, c, nil, long))
	_, err = s.Reserve(ctx, key, other, long)
	wantErr(t, "Reserve of the done key with the other fingerprint", err, idem.ErrFingerprintMismatch)
	wantState(t, reserve(t, s, key, fp, long), keystore.Done)
}
