package memstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/compact"
	"github.com/idem-go/idem/keystore"
)

// Extend implements [keystore.Extender]: under the key's shard lock, the
// lease of cl, if cl's token still holds the key (live or lapsed but not
// taken over), ends lease from now. Otherwise it returns an error wrapping
// keystore.ErrLeaseLost and changes nothing.
func (s *Store) Extend(ctx context.Context, cl keystore.Claim, lease time.Duration) (keystore.Claim, error) {
	sh, kfp, err := s.lock(ctx, "extend", cl.Key, func() error { return keystore.ValidateExtend(cl, lease) })
	if err != nil {
		return keystore.Claim{}, err
	}
	defer sh.mu.Unlock()
	exp := after(s.c.now(), lease)
	if i, ok := sh.t.find(kfp, s.prefix, cl.Key); ok {
		e := sh.t.at(i)
		if e.token != cl.Token || e.state != stInProgress {
			return keystore.Claim{}, keystore.LeaseLostError("extend", cl.Key, cl.Token)
		}
		e.exp = exp
	} else {
		j := sh.pending.find(kfp)
		if j < 0 || sh.pending.slots[j].token != cl.Token {
			return keystore.Claim{}, keystore.LeaseLostError("extend", cl.Key, cl.Token)
		}
		sh.pending.slots[j].exp = exp
	}
	sh.lower(exp)
	cl.Expires = s.c.at(exp)
	return cl, nil
}

// Inspect implements [keystore.Inspector], in every tier. A key done in
// the compact tier has token, expiry and an empty result, no fingerprint.
func (s *Store) Inspect(ctx context.Context, key string) (keystore.KeyInfo, error) {
	sh, kfp, err := s.lock(ctx, "inspect", key, func() error { return keystore.ValidateInspect(ctx, key) })
	if err != nil {
		return keystore.KeyInfo{}, err
	}
	defer sh.mu.Unlock()
	now := s.c.now()
	if i, ok := sh.t.find(kfp, s.prefix, key); ok {
		e := sh.t.at(i)
		if e.state == stDone && e.exp <= now {
			return keystore.KeyInfo{}, keystore.NotFoundError(key)
		}
		info := s.c.info(key, e)
		if e.state == stDone {
			info.Result = e.result()
		}
		return info, nil
	}
	if j := sh.pending.find(kfp); j >= 0 {
		return s.c.pendInfo(key, &sh.pending.slots[j]), nil
	}
	if r, found := sh.findDone(s.c, kfp, now); found {
		return keystore.KeyInfo{Key: key, State: keystore.Done, Token: sh.token(r.Aux), Expires: s.c.at(r.T), Result: []byte{}}, nil
	}
	return keystore.KeyInfo{}, keystore.NotFoundError(key)
}

// List implements [keystore.Inspector], in key order, over the keys of s's
// scope in the map tier and those in progress. Keys done in the compact
// tier (an empty result and no request fingerprint) are not listed: that
// tier keeps a fingerprint of each key, not its name, which is what makes
// it 24 bytes a key; Inspect finds them by name. Each page takes every
// shard lock in turn and sorts the matching keys: O(n log n) for n keys, an
// operator's tool, not a hot path.
func (s *Store) List(ctx context.Context, opts keystore.ListOptions) ([]keystore.KeyInfo, string, error) {
	opts, err := keystore.ValidateList(ctx, opts)
	if err != nil {
		return nil, "", err
	}
	var out []keystore.KeyInfo
	for i := range s.c.shards {
		sh := &s.c.shards[i]
		sh.mu.Lock()
		if sh.t.closed() {
			sh.mu.Unlock()
			return nil, "", fmt.Errorf("memstore: list: %w", idem.ErrClosed)
		}
		out = s.listShard(sh, out, opts)
		sh.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b keystore.KeyInfo) int { return strings.Compare(a.Key, b.Key) })
	if len(out) > opts.Limit {
		return out[:opts.Limit], out[opts.Limit-1].Key, nil
	}
	return out, "", nil
}

// listShard appends to out the keys of sh in s's scope after opts.After and
// in opts.State. Called with the shard locked.
func (s *Store) listShard(sh *shard, out []keystore.KeyInfo, opts keystore.ListOptions) []keystore.KeyInfo {
	now := s.c.now()
	want := func(key string, st keystore.State) bool {
		return key > opts.After && (opts.State == 0 || opts.State == st)
	}
	for i := range sh.t.all {
		e := sh.t.at(i)
		key, ok := strings.CutPrefix(e.key(), s.prefix)
		if !ok || e.state == stDone && e.exp <= now {
			continue
		}
		if info := s.c.info(key, e); want(key, info.State) {
			out = append(out, info)
		}
	}
	for _, p := range sh.pending.all() {
		if p.prefix == s.prefix && want(p.key, keystore.InProgress) {
			out = append(out, s.c.pendInfo(p.key, p))
		}
	}
	return out
}

// Forget implements [keystore.Forgetter]. A key done in the compact tier
// is ignored from then on, and its record, which the tier cannot delete
// early, still counts towards [WithMaxKeys] until its result would have
// expired.
func (s *Store) Forget(ctx context.Context, key string) error {
	sh, kfp, err := s.lock(ctx, "forget", key, func() error { return keystore.ValidateInspect(ctx, key) })
	if err != nil {
		return err
	}
	defer sh.mu.Unlock()
	now := s.c.now()
	if i, ok := sh.t.find(kfp, s.prefix, key); ok {
		switch e := sh.t.at(i); {
		case e.state == stInProgress:
			return keystore.ForgetInProgressError(key)
		case e.exp <= now:
			return keystore.NotFoundError(key)
		}
		sh.remove(i)
		s.c.count.Add(-1)
		return nil
	}
	if sh.pending.find(kfp) >= 0 {
		return keystore.ForgetInProgressError(key)
	}
	r, found := sh.findDone(s.c, kfp, now)
	if !found {
		return keystore.NotFoundError(key)
	}
	if sh.forgotten == nil {
		sh.forgotten = make(map[compact.FP]int64)
	}
	sh.forgotten[kfp] = r.T
	return nil
}

// info is the KeyInfo of the map-tier entry e of key.
func (c *core) info(key string, e *entry) keystore.KeyInfo {
	k := keystore.KeyInfo{Key: key, State: keystore.InProgress, Token: e.token, Expires: c.at(e.exp), Fingerprint: keystore.HexFingerprint([]byte(e.fp()))}
	if e.state == stDone {
		k.State, k.ResultSize = keystore.Done, e.size()-int(e.fpLen)
	}
	return k
}

// pendInfo is the KeyInfo of the pending key p.
func (c *core) pendInfo(key string, p *pend) keystore.KeyInfo {
	return keystore.KeyInfo{Key: key, State: keystore.InProgress, Token: p.token, Expires: c.at(p.exp)}
}
