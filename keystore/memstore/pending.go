package memstore

import (
	"github.com/idem-go/idem/internal/compact"
)

// pend is a key in progress that was reserved without a request
// fingerprint: the common case of keystore.Do. Such keys are kept by their
// compact-tier fingerprint, in a map with fixed-size keys and values (no
// allocation per key, unlike the map tier's string keys), so that a
// Reserve and a Complete with an empty result never touch the map tier:
// the key goes from here straight to the compact tier. They are compared
// by fingerprint, as completed keys in the compact tier are (see the
// package documentation for the bound).
type pend struct {
	exp   int64 // lease expiry, ns since base
	token uint64
	// key and prefix name the key for [Store.List]: the caller's string
	// and the scope's, kept without a copy (32 bytes a key in progress,
	// none once it completes into the compact tier).
	key, prefix string
}

// pendKey is a compact fingerprint as a pending map's key: 16 bytes without
// padding, which the map hashes in one call (a struct with padding is
// hashed field by field).
type pendKey [2]uint64

func pkey(fp compact.FP) pendKey { return pendKey{fp.Lo, uint64(fp.Hi)} }

// reservePending records a new pending claim. Called with the shard locked.
func (s *Store) reservePending(sh *shard, key string, fp compact.FP, exp int64) uint64 {
	sh.tokens++
	sh.pending[pkey(fp)] = pend{exp: exp, token: sh.tokens, key: key, prefix: s.prefix}
	sh.lower(exp)
	return sh.tokens
}

// completePending completes the pending claim with fingerprint fp: into the
// compact tier if its result is empty and its expiry in order there, into
// the map tier (under the internal key k) otherwise. Called with the shard
// locked.
func (s *Store) completePending(sh *shard, k []byte, fp compact.FP, p pend, result []byte, exp int64) {
	delete(sh.pending, pkey(fp))
	if len(result) == 0 && s.appendDone(sh, fp, p.token, exp) {
		return
	}
	sh.add(k, entry{data: string(result), exp: exp, token: p.token, state: stDone})
	sh.lower(exp)
}

// samplePending deletes the expired entries among a few pending ones.
// Called with the shard locked.
func (sh *shard) samplePending(now int64) int {
	seen, freed := 0, 0
	for fp, p := range sh.pending {
		if p.exp <= now {
			delete(sh.pending, fp)
			freed++
		}
		if seen++; seen == sampleSize {
			break
		}
	}
	return freed
}

// scanPending deletes up to limit expired pending entries and returns how
// many it deleted, the earliest expiry of those left, and whether it looked
// at all of them. Called with the shard locked.
func (sh *shard) scanPending(now int64, limit int, least int64) (freed int, _ int64, complete bool) {
	for fp, p := range sh.pending {
		if p.exp <= now {
			if freed >= limit {
				return freed, least, false
			}
			delete(sh.pending, fp)
			freed++
			continue
		}
		least = min(least, p.exp)
	}
	return freed, least, true
}
