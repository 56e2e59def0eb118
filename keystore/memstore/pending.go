package memstore

import (
	"iter"

	"github.com/idem-go/idem/internal/compact"
)

// pend is a key in progress that was reserved without a request
// fingerprint: the common case of keystore.Do. Such keys are kept by their
// compact-tier fingerprint in the shard's pending table (no allocation per
// key, unlike the map tier's string keys), so that a Reserve and a Complete
// with an empty result never touch the map tier: the key goes from here
// straight to the compact tier. They are compared by fingerprint, as
// completed keys in the compact tier are (see the package documentation
// for the bound).
type pend struct {
	fp    compact.FP
	exp   int64  // lease expiry, ns since base
	token uint64 // 0: an empty slot
	// key and prefix name the key for [Store.List] and for Complete's
	// lookup by token: the caller's string and the scope's, kept without a
	// copy (32 bytes a key in progress, none once it completes into the
	// compact tier).
	key, prefix string
}

// minPending is the smallest capacity of a pending table.
const minPending = 8

// pendTable is a shard's keys in progress reserved without a request
// fingerprint: an open-addressing table by fingerprint with linear probing
// and backward-shift deletion (no tombstones, so a deleted slot is reused
// at once), which grows at 3/4 full and shrinks below 1/8. Its slots hold
// two strings each, but there are only as many as keys in progress, not
// as many as keys held.
//
// byTok finds a claim by its token without its fingerprint, so Complete and
// Release need not hash the key again: the slot (plus 1) of the claim with
// token t is at byTok[(t/numShards) & mask]. It is only a hint, checked
// against the slot's token; a shard's tokens step by numShards, so the
// last len(byTok) claims of a shard have distinct places, and an older
// claim still in progress may have lost its place and is then found by
// fingerprint.
type pendTable struct {
	slots  []pend
	byTok  []uint32
	n      int
	cursor int // where the next sample starts
}

// tokIdx is the place of token in byTok.
func (t *pendTable) tokIdx(token uint64) int {
	return int(token/numShards) & (len(t.byTok) - 1)
}

// find returns the slot of the key with fingerprint fp, or -1.
func (t *pendTable) find(fp compact.FP) int {
	if t.n == 0 {
		return -1
	}
	m := len(t.slots) - 1
	for i := int(fp.Lo) & m; ; i = (i + 1) & m {
		switch s := &t.slots[i]; {
		case s.token == 0:
			return -1
		case s.fp == fp:
			return i
		}
	}
}

// byToken returns the slot of the claim with token, or -1 when the hint
// does not lead to it (see pendTable).
func (t *pendTable) byToken(token uint64) int {
	if t.n == 0 {
		return -1
	}
	j := int(t.byTok[t.tokIdx(token)]) - 1
	if j < 0 || t.slots[j].token != token {
		return -1
	}
	return j
}

// insert adds p, whose fingerprint must be absent, and returns its slot.
func (t *pendTable) insert(p pend) int {
	switch {
	case t.slots == nil:
		t.slots, t.byTok = make([]pend, minPending), make([]uint32, minPending)
	case (t.n+1)*4 > len(t.slots)*3:
		t.resize(2 * len(t.slots))
	}
	m := len(t.slots) - 1
	i := int(p.fp.Lo) & m
	for t.slots[i].token != 0 {
		i = (i + 1) & m
	}
	t.slots[i] = p
	t.byTok[t.tokIdx(p.token)] = uint32(i + 1)
	t.n++
	return i
}

// retoken gives the claim in slot i a new token and lease expiry (a
// takeover).
func (t *pendTable) retoken(i int, token uint64, exp int64, key, prefix string) {
	s := &t.slots[i]
	t.unhint(i)
	s.token, s.exp, s.key, s.prefix = token, exp, key, prefix
	t.byTok[t.tokIdx(token)] = uint32(i + 1)
}

// unhint clears byTok's place for slot i if it leads there.
func (t *pendTable) unhint(i int) {
	if k := t.tokIdx(t.slots[i].token); t.byTok[k] == uint32(i+1) {
		t.byTok[k] = 0
	}
}

// remove deletes the key in slot i and shrinks the table if it is mostly
// empty. It must not be called while iterating: use del and then shrink.
func (t *pendTable) remove(i int) {
	t.del(i)
	t.shrink()
}

// del deletes the key in slot i, moving later keys of its probe run back
// so that no probe passes an empty slot before reaching its key. Every
// key it moves lands at a slot at or after i in probe order, or in the run
// that wrapped around the table's end, so an iteration that looks at slot
// i again after del(i) misses no key.
func (t *pendTable) del(i int) {
	m := len(t.slots) - 1
	t.unhint(i)
	for j := (i + 1) & m; t.slots[j].token != 0; j = (j + 1) & m {
		h := int(t.slots[j].fp.Lo) & m
		// The key at j may fill the hole at i unless its home h lies in the
		// cyclic range (i, j].
		if i <= j && (h <= i || h > j) || i > j && h <= i && h > j {
			if k := t.tokIdx(t.slots[j].token); t.byTok[k] == uint32(j+1) {
				t.byTok[k] = uint32(i + 1)
			}
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = pend{}
	t.n--
}

// shrink halves the table until it is at least 1/8 full (it is then at
// most 1/4 full) or at its least size.
func (t *pendTable) shrink() {
	n := len(t.slots)
	for n > minPending && t.n*8 < n {
		n /= 2
	}
	if n != len(t.slots) {
		t.resize(n)
	}
}

// resize moves every key to a table of n slots (a power of two).
func (t *pendTable) resize(n int) {
	old := t.slots
	t.slots, t.byTok, t.n, t.cursor = make([]pend, n), make([]uint32, n), 0, 0
	for i := range old {
		if old[i].token != 0 {
			t.insert(old[i])
		}
	}
}

// all yields every slot index holding a key. The caller must not change
// the table meanwhile.
func (t *pendTable) all() iter.Seq2[int, *pend] {
	return func(yield func(int, *pend) bool) {
		for i := range t.slots {
			if t.slots[i].token != 0 && !yield(i, &t.slots[i]) {
				return
			}
		}
	}
}

// reservePending records a new pending claim. Called with the shard locked.
func (s *Store) reservePending(sh *shard, key string, fp compact.FP, exp int64) uint64 {
	token := sh.nextToken()
	sh.pending.insert(pend{fp: fp, exp: exp, token: token, key: key, prefix: s.prefix})
	sh.lower(exp)
	return token
}

// completePending completes the pending claim in slot i: into the compact
// tier if its result is empty and its expiry in order there, into the map
// tier otherwise. Called with the shard locked.
func (s *Store) completePending(sh *shard, i int, result []byte, exp int64) {
	p := sh.pending.slots[i]
	sh.pending.remove(i)
	if len(result) == 0 && s.appendDone(sh, p.fp, p.token, exp) {
		return
	}
	sh.add(newEntry(s.prefix, p.key, p.fp, "", result, exp, p.token, stDone))
	sh.lower(exp)
}

// samplePending deletes the expired entries among a few pending ones,
// starting where the last sample ended. Called with the shard locked.
func (sh *shard) samplePending(now int64) int {
	t := &sh.pending
	if t.n == 0 {
		return 0
	}
	seen, freed := 0, 0
	i := t.cursor & (len(t.slots) - 1)
	for range len(t.slots) {
		if p := &t.slots[i]; p.token != 0 {
			if p.exp <= now {
				t.del(i)
				freed++
				if t.n == 0 {
					break
				}
				continue // a later key may have moved into slot i
			}
			if seen++; seen == sampleSize {
				break
			}
		}
		i = (i + 1) & (len(t.slots) - 1)
	}
	t.cursor = i
	t.shrink()
	return freed
}

// scanPending deletes up to limit expired pending entries and returns how
// many it deleted, the earliest expiry of those left, and whether it looked
// at all of them. Called with the shard locked.
func (sh *shard) scanPending(now int64, limit int, least int64) (freed int, _ int64, complete bool) {
	t := &sh.pending
	defer t.shrink()
	for i := 0; i < len(t.slots); {
		p := &t.slots[i]
		switch {
		case p.token == 0:
		case p.exp <= now:
			if freed >= limit {
				return freed, least, false
			}
			t.del(i)
			freed++
			continue // look at slot i again: a later key may have moved in
		default:
			least = min(least, p.exp)
		}
		i++
	}
	return freed, least, true
}
