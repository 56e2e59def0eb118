package memstore

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/keystore"
)

// Reserve implements [keystore.Store.Reserve]. It takes one shard lock and,
// for a new key, inspects at most a few other entries of that shard.
func (s *Store) Reserve(ctx context.Context, key string, fp []byte, lease time.Duration) (keystore.Claim, error) {
	sh, kfp, err := s.lock(ctx, "reserve", key, func() error { return keystore.ValidateReserve(key, fp, lease) })
	if err != nil {
		return keystore.Claim{}, err
	}
	defer sh.mu.Unlock()
	c := s.c
	now := c.now()
	i, ok := sh.t.find(kfp, s.prefix, key)
	var e *entry
	if ok {
		e = sh.t.at(i)
	}
	takeover := false
	switch {
	case ok && e.exp > now:
		if idem.FingerprintsConflict([]byte(e.fp()), fp) {
			return keystore.Claim{}, keystore.MismatchError(key)
		}
		if e.state == stInProgress {
			return keystore.Claim{Key: key, State: keystore.InProgress, Expires: c.at(e.exp)}, nil
		}
		return keystore.Claim{Key: key, State: keystore.Done, Expires: c.at(e.exp), Result: e.result()}, nil
	case ok:
		// Expired: reuse the slot. An expired lease is taken over.
		takeover = e.state == stInProgress
	default:
		if j := sh.pending.find(kfp); j >= 0 {
			if p := &sh.pending.slots[j]; p.exp > now {
				return keystore.Claim{Key: key, State: keystore.InProgress, Expires: c.at(p.exp)}, nil
			}
			// An expired lease: taken over.
			exp := after(now, lease)
			if len(fp) == 0 {
				token := sh.nextToken()
				sh.pending.retoken(j, token, exp, key, s.prefix)
				sh.lower(exp)
				return keystore.Claim{Key: key, State: keystore.Acquired, Token: token, Expires: c.at(exp), Takeover: true}, nil
			}
			sh.pending.remove(j) // it moves to the map tier, with fp
			takeover = true
			break
		}
		if r, found := sh.findDone(c, kfp, now); found {
			// Completed with an empty result and no fingerprint: nothing to
			// compare fp with, as for a stored entry without one.
			return keystore.Claim{Key: key, State: keystore.Done, Expires: c.at(r.T), Result: []byte{}}, nil
		}
		if now >= sh.minExp.Load() && now >= sh.nextSample {
			sh.sample(c, now)
		}
		if !c.admit(sh, now) {
			return keystore.Claim{}, fmt.Errorf("memstore: reserve %q: limit of %d keys reached, none expired: %w", key, c.maxKeys, ErrFull)
		}
		if len(fp) == 0 {
			exp := after(now, lease)
			token := s.reservePending(sh, key, kfp, exp)
			return keystore.Claim{Key: key, State: keystore.Acquired, Token: token, Expires: c.at(exp)}, nil
		}
	}
	token := sh.nextToken()
	exp := after(now, lease)
	n := newEntry(s.prefix, key, kfp, fp, nil, exp, token, stInProgress)
	if ok {
		sh.set(i, n)
	} else {
		sh.add(n)
	}
	sh.lower(exp)
	return keystore.Claim{Key: key, State: keystore.Acquired, Token: token, Expires: c.at(exp), Takeover: takeover}, nil
}

// Complete implements [keystore.Store.Complete].
//
// A claim that Reserve put in the pending tier (no request fingerprint) is
// found by its token, in the shard the token names, without hashing or
// validating the key again: it is the claim only if that shard holds a
// pending claim with this exact token, key and scope, which is what the
// lookup by fingerprint would have found. Any other claim (a stale, foreign
// or forged token, one already completed, one in the map tier, bad input)
// takes the general path, which hashes and validates the key.
func (s *Store) Complete(ctx context.Context, cl keystore.Claim, result []byte, ttl time.Duration) error {
	if s.c.maxBytes > 0 && len(result) > SmallResult {
		if err := s.c.budget(cl.Key, len(result)); err != nil {
			return err
		}
	}
	if cl.State == keystore.Acquired && cl.Token != 0 && ttl > 0 && len(result) <= s.c.maxResult {
		if sh, j := s.lockToken(ctx, &cl); j >= 0 {
			s.completePending(sh, j, result, after(s.c.now(), ttl))
			sh.mu.Unlock()
			s.signal(cl.Key)
			return nil
		}
	}
	// The path by fingerprint is a function of its own, so that the common
	// call above runs from a small frame (a goroutine a message pays for
	// each byte of stack by growing it).
	return s.complete(ctx, &cl, result, ttl)
}

// budget reports the error of a result of n bytes that would pass the
// store's byte budget (WithMaxBytes), if it would.
func (c *core) budget(key string, n int) error {
	if held := c.heldBytes(); held+int64(n) > c.maxBytes {
		return fmt.Errorf("memstore: complete %q: a %d-byte result would pass the store's byte budget (%d of %d bytes held, WithMaxBytes): %w", key, n, held, c.maxBytes, keystore.ErrResultTooLarge)
	}
	return nil
}

// complete is Complete by the key's fingerprint: a claim that is not
// pending, or an invalid one.
func (s *Store) complete(ctx context.Context, cl *keystore.Claim, result []byte, ttl time.Duration) error {
	sh, kfp, err := s.lock(ctx, "complete", cl.Key, func() error { return keystore.ValidateComplete(*cl, result, ttl, s.c.maxResult) })
	if err != nil {
		return err
	}
	defer sh.mu.Unlock()
	c := s.c
	// A key in progress without a request fingerprint is pending, in no
	// other tier, so the map tier is not looked up.
	if j := sh.pending.find(kfp); j >= 0 && sh.pending.slots[j].token == cl.Token {
		s.completePending(sh, j, result, after(c.now(), ttl))
		s.signal(cl.Key)
		return nil
	}
	i, ok := sh.t.find(kfp, s.prefix, cl.Key)
	if !ok {
		now := c.now()
		if r, found := sh.findDone(c, kfp, now); found && sh.token(r.Aux) == cl.Token {
			return nil // this claim completed already
		}
		return keystore.LeaseLostError("complete", cl.Key, cl.Token)
	}
	e := sh.t.at(i)
	if e.token != cl.Token {
		return keystore.LeaseLostError("complete", cl.Key, cl.Token)
	}
	if e.state == stDone {
		return nil // this claim completed already
	}
	now := c.now()
	defer s.signal(cl.Key)
	if len(result) == 0 && e.fpLen == 0 && s.completeDone(sh, kfp, i, e, after(now, ttl)) {
		return nil
	}
	sh.set(i, newEntry("", e.key(), kfp, e.fp(), result, after(now, ttl), e.token, stDone))
	sh.lower(e.exp)
	return nil
}

// Release implements [keystore.Store.Release]. A pending claim is found
// by its token, as in Complete.
func (s *Store) Release(ctx context.Context, cl keystore.Claim) error {
	if cl.State == keystore.Acquired && cl.Token != 0 {
		if sh, j := s.lockToken(ctx, &cl); j >= 0 {
			sh.pending.remove(j)
			s.c.count.Add(-1)
			sh.mu.Unlock()
			s.signal(cl.Key)
			return nil
		}
	}
	sh, kfp, err := s.lock(ctx, "release", cl.Key, func() error { return keystore.ValidateRelease(cl) })
	if err != nil {
		return err
	}
	defer sh.mu.Unlock()
	c := s.c
	i, ok := sh.t.find(kfp, s.prefix, cl.Key)
	if !ok {
		if j := sh.pending.find(kfp); j >= 0 && sh.pending.slots[j].token == cl.Token {
			sh.pending.remove(j)
			c.count.Add(-1)
			s.signal(cl.Key)
			return nil
		}
		return keystore.LeaseLostError("release", cl.Key, cl.Token)
	}
	if e := sh.t.at(i); e.token != cl.Token || e.state != stInProgress {
		return keystore.LeaseLostError("release", cl.Key, cl.Token)
	}
	sh.remove(i)
	c.count.Add(-1)
	s.signal(cl.Key)
	return nil
}

// Sweep deletes every expired result and lease, at most batch of them per
// acquisition of a shard lock, and one shard lock at a time. It implements
// [keystore.Sweeper]; calling it is optional, since expired keys are also
// reclaimed as the store is used.
func (s *Store) Sweep(ctx context.Context, batch int) (int, error) {
	if batch <= 0 {
		return 0, fmt.Errorf("memstore: sweep: batch %d is not positive: %w", batch, idem.ErrInvalidArgument)
	}
	if s.c.closed.Load() {
		return 0, fmt.Errorf("memstore: sweep: %w", idem.ErrClosed)
	}
	deleted := 0
	for i := range s.c.shards {
		if err := ctx.Err(); err != nil {
			return deleted, fmt.Errorf("memstore: sweep: %w", err)
		}
		sh := &s.c.shards[i]
		for {
			now := s.c.now()
			if now < sh.minExp.Load() {
				break
			}
			sh.mu.Lock()
			n := 0
			if !sh.t.closed() {
				n = sh.scan(s.c, now, batch)
			}
			sh.mu.Unlock()
			deleted += n
			if n < batch {
				break
			}
		}
	}
	return deleted, nil
}

// after returns the time d after now (ns since base), d capped at
// keystore.MaxDuration and the sum saturated at the largest time, so that a
// huge lease or TTL never wraps around into the past.
func after(now int64, d time.Duration) int64 {
	d = keystore.CapDuration(d)
	if int64(d) > math.MaxInt64-now {
		return math.MaxInt64
	}
	return now + int64(d)
}

// lower records that the shard holds an entry expiring at exp. Called with
// the shard locked.
func (sh *shard) lower(exp int64) {
	if exp < sh.minExp.Load() {
		sh.minExp.Store(exp)
	}
}

// sample deletes the expired entries among a few entries of the shard,
// starting at the random position where Go begins a map iteration. Called
// with the shard locked.
func (sh *shard) sample(c *core, now int64) {
	seen, freed := 0, 0
	for i := range sh.t.all {
		if sh.t.at(i).exp <= now {
			sh.remove(i)
			freed++
		}
		if seen++; seen == sampleSize {
			break
		}
	}
	freed += sh.samplePending(now)
	c.count.Add(int64(-freed))
	if freed == 0 {
		sh.nextSample = now + sampleBackoff
	}
}

// scan deletes up to limit expired entries of the shard and, when it looked
// at every entry, sets minExp to the exact earliest expiry left. Called with
// the shard locked.
func (sh *shard) scan(c *core, now int64, limit int) int {
	freed := 0
	least := int64(math.MaxInt64)
	if sh.done != nil {
		// The compact tier expires in order: dropping is cheap and exact.
		freed = sh.dropThrough(now)
		c.count.Add(int64(-freed))
		if t, ok := sh.done.Oldest(); ok {
			least = t
		}
	}
	complete := true
	removed := 0
	for i := range sh.t.all {
		exp := sh.t.at(i).exp
		if exp <= now {
			if freed >= limit {
				complete = false
				break
			}
			sh.remove(i)
			freed++
			removed++
			continue
		}
		least = min(least, exp)
	}
	c.count.Add(int64(-removed))
	if complete {
		var n int
		n, least, complete = sh.scanPending(now, limit-freed, least)
		freed += n
		c.count.Add(int64(-n))
	}
	if complete {
		sh.minExp.Store(least)
	}
	return freed
}

// admit counts one more key if the limit allows, reclaiming expired keys
// when it does not. own is locked by the caller.
func (c *core) admit(own *shard, now int64) bool {
	if c.take() {
		return true
	}
	if now >= own.minExp.Load() && own.scan(c, now, math.MaxInt) > 0 && c.take() {
		return true
	}
	// Other shards are only tried, never waited for: two full shards
	// reclaiming from each other must not deadlock.
	for i := range c.shards {
		sh := &c.shards[i]
		if sh == own || now < sh.minExp.Load() || !sh.mu.TryLock() {
			continue
		}
		freed := 0
		if !sh.t.closed() {
			freed = sh.scan(c, now, math.MaxInt)
		}
		sh.mu.Unlock()
		if freed > 0 && c.take() {
			return true
		}
	}
	return false
}

// take counts one more key unless the store is at its limit.
func (c *core) take() bool {
	for {
		n := c.count.Load()
		if n >= c.maxKeys {
			return false
		}
		if c.count.CompareAndSwap(n, n+1) {
			return true
		}
	}
}
