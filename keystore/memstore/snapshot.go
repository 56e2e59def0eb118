package memstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/compact"
	"github.com/idem-go/idem/keystore"
)

// ErrCorruptSnapshot is wrapped by the errors of [Restore] and [Load] when
// the data is not a complete, intact snapshot: bad magic, unknown version,
// truncated, a checksum mismatch, or keys that break the store's
// invariants. No store is returned.
var ErrCorruptSnapshot = errors.New("memstore: corrupt snapshot")

// Snapshot encoding, versions 1 and 2. Integers are big-endian and fixed
// width; times are wall-clock Unix nanoseconds (math.MaxInt64: never).
//
//	magic    4 bytes  "IDMS"
//	version  uint8    2, or 1 (see below)
//	key      16 bytes the fingerprint key (it picks each key's shard)
//	saved    int64    when the snapshot was taken
//	shards   uint16   64
//	per shard, in order:
//	    tokens  uint64  the last fencing token the shard handed out
//	    done    uint32  n, then n compact-tier keys in expiry order:
//	                    fingerprint 12 bytes, expiry int64, token uint64
//	    pending uint32  n, then n keys in progress without a fingerprint:
//	                    expiry int64, token uint64, scope prefix (uint8
//	                    length, bytes), key (uint16 length, bytes)
//	    entries uint32  n, then n map-tier keys: internal key (uint16
//	                    length, bytes), expiry int64, token uint64, state
//	                    uint8, fingerprint length uint8, data (uint32
//	                    length, bytes: request fingerprint then result)
//	checksum uint32   CRC-32C (Castagnoli) of every preceding byte
//
// The versions differ only in how fingerprints were computed (they pick
// each key's shard, and name compact-tier keys, which are stored as
// nothing else). In version 2 a canonical lowercase UUID key was
// fingerprinted on the AES path of compact.Hasher and any other key with
// SipHash; in version 1 every key with SipHash. A store made by [New]
// uses SipHash for every key and writes version 1 (the AES path was
// measured slower here; see New). Either version loads into a store that
// fingerprints every key as the writer did, so that its compact-tier keys
// are still found, and that writes the same version in turn. Builds
// before version 2 refuse it ("unsupported version 2").
//
// Expired keys and forgotten compact-tier keys are left out. The file
// holds the fingerprint key: whoever can read it can craft keys that
// collide, so SaveSnapshot creates it readable by its owner only.
const (
	snapMagic     = "IDMS"
	snapVersion   = 2 // what a store with the AES path for UUIDs writes
	snapVersionV1 = 1 // every key fingerprinted with SipHash
	snapHeader    = 4 + 1 + 16 + 8 + 2
	snapDoneLen   = 12 + 8 + 8
)

// WriteSnapshot writes every live key of the store, in every scope, in
// every state, with the shards' token counters and the fingerprint key, to
// w in the format above: 32 bytes a compact-tier key. It locks one shard
// at a time, copying it out under its lock, so calls on other shards go
// on meanwhile; each shard is written as it was at one instant, and a key
// never moves between shards. Keys changed after their shard was copied
// are written as they were: after a crash and a [Restore], those changes
// are lost, as every change since the snapshot is.
func (s *Store) WriteSnapshot(w io.Writer) error {
	if s.c.closed.Load() {
		return fmt.Errorf("memstore: write snapshot: %w", idem.ErrClosed)
	}
	bw := compact.NewSnapWriter(w)
	c := s.c
	h := make([]byte, 0, snapHeader)
	h = append(h, snapMagic...)
	key := c.fpKey.Key()
	if c.fpKey.UUIDPath() {
		h = append(h, snapVersion)
	} else {
		h = append(h, snapVersionV1)
	}
	h = append(h, key[:]...)
	h = binary.BigEndian.AppendUint64(h, uint64(c.base.UnixNano()+c.now()))
	h = binary.BigEndian.AppendUint16(h, numShards)
	bw.Write(h)
	var buf []byte
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		if sh.t.closed() {
			sh.mu.Unlock()
			return fmt.Errorf("memstore: write snapshot: %w", idem.ErrClosed)
		}
		buf = c.appendShard(buf[:0], sh, c.now())
		sh.mu.Unlock()
		bw.Write(buf)
	}
	if err := bw.Close(); err != nil {
		return fmt.Errorf("memstore: write snapshot: %w", err)
	}
	return nil
}

// appendShard appends the encoding of sh's live keys at now. Called with
// the shard locked.
func (c *core) appendShard(b []byte, sh *shard, now int64) []byte {
	b = binary.BigEndian.AppendUint64(b, sh.tokens)
	at := len(b)
	b = append(b, 0, 0, 0, 0)
	n := 0
	if sh.done != nil {
		sh.done.Each(func(fp compact.FP, r compact.Rec) {
			if _, gone := sh.forgotten[fp]; gone || r.T <= now {
				return
			}
			b = binary.BigEndian.AppendUint64(b, fp.Lo)
			b = binary.BigEndian.AppendUint32(b, fp.Hi)
			b = binary.BigEndian.AppendUint64(b, uint64(c.wall(r.T)))
			b = binary.BigEndian.AppendUint64(b, sh.token(r.Aux))
			n++
		})
	}
	binary.BigEndian.PutUint32(b[at:], uint32(n))
	at, n = len(b), 0
	b = append(b, 0, 0, 0, 0)
	for _, p := range sh.pending.all() {
		if p.exp <= now {
			continue
		}
		b = binary.BigEndian.AppendUint64(b, uint64(c.wall(p.exp)))
		b = binary.BigEndian.AppendUint64(b, p.token)
		b = append(b, byte(len(p.prefix)))
		b = append(b, p.prefix...)
		b = binary.BigEndian.AppendUint16(b, uint16(len(p.key)))
		b = append(b, p.key...)
		n++
	}
	binary.BigEndian.PutUint32(b[at:], uint32(n))
	at, n = len(b), 0
	b = append(b, 0, 0, 0, 0)
	for i := range sh.t.all {
		e := sh.t.at(i)
		if e.exp <= now {
			continue
		}
		k := e.key()
		b = binary.BigEndian.AppendUint16(b, uint16(len(k)))
		b = append(b, k...)
		b = binary.BigEndian.AppendUint64(b, uint64(c.wall(e.exp)))
		b = binary.BigEndian.AppendUint64(b, e.token)
		b = append(b, e.state, e.fpLen)
		b = binary.BigEndian.AppendUint32(b, uint32(e.size()))
		b = append(b, e.value()...)
		n++
	}
	binary.BigEndian.PutUint32(b[at:], uint32(n))
	return b
}

// wall returns the wall-clock Unix nanoseconds of the store time ns,
// saturated at math.MaxInt64 (never).
func (c *core) wall(ns int64) int64 {
	b := c.base.UnixNano()
	if ns > math.MaxInt64-b {
		return math.MaxInt64
	}
	return b + ns
}

// since returns the store time of the wall-clock Unix nanoseconds w; never
// stays never.
func (c *core) since(w int64) int64 {
	if w == math.MaxInt64 {
		return math.MaxInt64
	}
	return w - c.base.UnixNano()
}

// SaveSnapshot writes a snapshot (see [Store.WriteSnapshot]) to path
// atomically: to a temporary file in the same directory (mode 0600: it
// holds the fingerprint key), synced, then renamed over path. A crash at
// any point leaves either the previous file or the new one, never a
// partial file.
func (s *Store) SaveSnapshot(path string) error {
	return compact.SaveFile(path, "memstore", s.WriteSnapshot)
}

// Restore returns a store configured by opts holding the keys of a
// snapshot written by [Store.WriteSnapshot], read from r to its end:
// every scope's keys done (with their results) and in progress (with
// their leases and tokens), expiring at the same wall-clock times; keys
// expired by now are left out. The input is checked completely (magic,
// version, length, checksum, each key in the shard its fingerprint picks,
// compact-tier keys in expiry order and unique, results within
// [WithMaxResultSize]) before the store is returned; bad data returns an
// error wrapping ErrCorruptSnapshot, more keys than [WithMaxKeys] allows
// one wrapping ErrFull.
//
// Fencing tokens: each shard continues from the larger of the token it had
// handed out when the snapshot was taken and the wall clock's Unix
// nanoseconds now (see [New]), so a restored store never hands out a token
// at or below one handed out before, by the process that wrote the
// snapshot or by any earlier one, unless the wall clock was set back.
func Restore(r io.Reader, opts ...Option) (*Store, error) {
	cfg, err := configure(opts)
	if err != nil {
		return nil, err
	}
	br := compact.NewSnapReader(r, "memstore", ErrCorruptSnapshot)
	var h [snapHeader]byte
	if err := br.Full(h[:], "header"); err != nil {
		return nil, err
	}
	if string(h[:4]) != snapMagic {
		return nil, fmt.Errorf("memstore: bad magic %q: %w", h[:4], ErrCorruptSnapshot)
	}
	if h[4] != snapVersion && h[4] != snapVersionV1 {
		return nil, fmt.Errorf("memstore: unsupported version %d (this build reads versions %d and %d): %w", h[4], snapVersionV1, snapVersion, ErrCorruptSnapshot)
	}
	if n := binary.BigEndian.Uint16(h[29:]); n != numShards {
		return nil, fmt.Errorf("memstore: %d shards, this build has %d: %w", n, numShards, ErrCorruptSnapshot)
	}
	var key compact.Key
	copy(key[:], h[5:21])
	hasher := compact.NewSipHasher(key)
	if h[4] == snapVersion {
		hasher = compact.NewHasher(key)
	}
	c := newCore(cfg, hasher)
	rd := restorer{c: c, br: br, prefixes: map[string]string{}}
	for i := range c.shards {
		if err := rd.shard(&c.shards[i], i); err != nil {
			return nil, err
		}
	}
	if err := br.Finish(); err != nil {
		return nil, err
	}
	if n := c.count.Load(); n > c.maxKeys {
		return nil, fmt.Errorf("memstore: restore: %d live keys, limit %d: %w", n, c.maxKeys, ErrFull)
	}
	return &Store{c: c, prefix: scopePrefix(keystore.DefaultScope)}, nil
}

// Load is [Restore] from a file written by [Store.SaveSnapshot]. A missing
// file returns an error wrapping fs.ErrNotExist, which a caller starting
// for the first time can take as "start empty" (with [New]).
func Load(path string, opts ...Option) (*Store, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("memstore: load snapshot: %w", err)
	}
	defer f.Close()
	s, err := Restore(f, opts...)
	if err != nil {
		return nil, fmt.Errorf("%w (file %s)", err, path)
	}
	return s, nil
}

// restorer reads a snapshot's shards into a new core. Its reads keep the
// first error (err) and read nothing after it, returning zero values: a
// caller reads a record's fields, then checks err once before using them.
type restorer struct {
	c        *core
	br       *compact.SnapReader
	now      int64
	prefixes map[string]string // one string per scope, as live stores share it
	b        [8]byte
	err      error
}

func (rd *restorer) corrupt(shard int, format string, args ...any) error {
	return fmt.Errorf("memstore: shard %d: %s: %w", shard, fmt.Sprintf(format, args...), ErrCorruptSnapshot)
}

// full fills p, unless an earlier read failed; it reports whether p was
// filled.
func (rd *restorer) full(p []byte, what string) bool {
	if rd.err == nil {
		rd.err = rd.br.Full(p, what)
	}
	return rd.err == nil
}

func (rd *restorer) u64(what string) uint64 {
	if !rd.full(rd.b[:8], what) {
		return 0
	}
	return binary.BigEndian.Uint64(rd.b[:8])
}

func (rd *restorer) u32(what string) uint32 {
	if !rd.full(rd.b[:4], what) {
		return 0
	}
	return binary.BigEndian.Uint32(rd.b[:4])
}

func (rd *restorer) bytes(n int, what string) string {
	if rd.err != nil {
		return ""
	}
	p := make([]byte, n)
	rd.full(p, what)
	return string(p)
}

// str reads a string after its length, a uint8 (w 1) or uint16 (w 2).
func (rd *restorer) str(w int, what string) string {
	if !rd.full(rd.b[:w], what) {
		return ""
	}
	n := int(rd.b[0])
	if w == 2 {
		n = int(binary.BigEndian.Uint16(rd.b[:2]))
	}
	return rd.bytes(n, what)
}

// shard reads shard number i into sh.
func (rd *restorer) shard(sh *shard, i int) error {
	c := rd.c
	rd.now = c.now()
	tokens := rd.u64("tokens")
	if rd.err != nil {
		return rd.err
	}
	sh.tokens = max(sh.tokens, tokens)
	if err := rd.done(sh, i); err != nil {
		return err
	}
	if err := rd.pending(sh, i); err != nil {
		return err
	}
	return rd.entries(sh, i)
}

// done reads a shard's compact-tier keys.
func (rd *restorer) done(sh *shard, i int) error {
	n := rd.u32("compact tier")
	var rb [snapDoneLen]byte
	last := int64(math.MinInt64)
	for j := range n {
		if !rd.full(rb[:], "compact tier") {
			return rd.err
		}
		fp := compact.FP{Lo: binary.BigEndian.Uint64(rb[0:]), Hi: binary.BigEndian.Uint32(rb[8:])}
		exp := rd.c.since(int64(binary.BigEndian.Uint64(rb[12:])))
		token := binary.BigEndian.Uint64(rb[20:])
		switch {
		case rd.c.shard(fp) != sh:
			return rd.corrupt(i, "compact key %d belongs to another shard", j)
		case exp < last:
			return rd.corrupt(i, "compact key %d is out of expiry order", j)
		case token > sh.tokens:
			return rd.corrupt(i, "compact key %d has token %d above the shard's %d", j, token, sh.tokens)
		}
		last = exp
		if exp <= rd.now {
			continue
		}
		if sh.done == nil {
			sh.newDone(rd.c)
		}
		if _, dup := sh.done.Find(fp); dup {
			return rd.corrupt(i, "compact key %d repeats a fingerprint", j)
		}
		if err := sh.done.Append(fp, compact.Rec{T: exp, Seq: sh.done.NextSeq(), Aux: sh.aux(token)}); err != nil {
			return fmt.Errorf("memstore: restore: %w", err)
		}
		sh.doneHead = min(sh.doneHead, exp)
		rd.add(sh, exp)
	}
	return rd.err
}

// pending reads a shard's keys in progress without a request fingerprint.
func (rd *restorer) pending(sh *shard, i int) error {
	n := rd.u32("pending keys")
	for j := range n {
		wexp, token := rd.u64("pending keys"), rd.u64("pending keys")
		prefix, key := rd.str(1, "pending keys"), rd.str(2, "pending keys")
		if rd.err != nil {
			return rd.err
		}
		if err := validPrefix(prefix); err != nil || idem.ValidateKey(key) != nil {
			return rd.corrupt(i, "pending key %d has an invalid scope or key", j)
		}
		fp := rd.c.fpKey.Sum(prefix, key)
		exp := rd.c.since(int64(wexp))
		switch dup := sh.pending.find(fp) >= 0; {
		case rd.c.shard(fp) != sh:
			return rd.corrupt(i, "pending key %d belongs to another shard", j)
		case dup:
			return rd.corrupt(i, "pending key %d repeats a key", j)
		case token > sh.tokens:
			return rd.corrupt(i, "pending key %d has token %d above the shard's %d", j, token, sh.tokens)
		}
		if exp <= rd.now {
			continue
		}
		if sh.done != nil {
			if _, in := sh.done.Find(fp); in {
				return rd.corrupt(i, "pending key %d is also done", j)
			}
		}
		sh.pending.insert(pend{fp: fp, exp: exp, token: token, key: key, prefix: rd.intern(prefix)})
		rd.add(sh, exp)
	}
	return rd.err
}

// entries reads a shard's map-tier keys.
func (rd *restorer) entries(sh *shard, i int) error {
	n := rd.u32("entries")
	for j := range n {
		ik := rd.str(2, "entries")
		wexp, token := rd.u64("entries"), rd.u64("entries")
		rd.full(rd.b[:2], "entries")
		state, fpLen := rd.b[0], rd.b[1]
		size := rd.u32("entries")
		if rd.err != nil {
			return rd.err
		}
		if int64(size) > int64(idem.MaxFingerprintLen+rd.c.maxResult) {
			return rd.corrupt(i, "entry %d holds %d bytes, over the fingerprint and result limits", j, size)
		}
		data := rd.bytes(int(size), "entries")
		if rd.err != nil {
			return rd.err
		}
		prefix, key, ok := splitKey(ik)
		switch {
		case !ok:
			return rd.corrupt(i, "entry %d has an invalid scope or key", j)
		case state != stInProgress && state != stDone, int(fpLen) > len(data), int(fpLen) > idem.MaxFingerprintLen:
			return rd.corrupt(i, "entry %d has state %d and a %d-byte fingerprint in %d bytes", j, state, fpLen, size)
		case int(size)-int(fpLen) > rd.c.maxResult:
			return rd.corrupt(i, "entry %d has a %d-byte result, over the limit %d", j, int(size)-int(fpLen), rd.c.maxResult)
		case token > sh.tokens:
			return rd.corrupt(i, "entry %d has token %d above the shard's %d", j, token, sh.tokens)
		}
		fp := rd.c.fpKey.Sum(prefix, key)
		if rd.c.shard(fp) != sh {
			return rd.corrupt(i, "entry %d belongs to another shard", j)
		}
		if _, dup := sh.t.find(fp, "", ik); dup {
			return rd.corrupt(i, "entry %d repeats a key", j)
		}
		exp := rd.c.since(int64(wexp))
		if exp <= rd.now {
			continue
		}
		if sh.pending.find(fp) >= 0 {
			return rd.corrupt(i, "entry %d is also pending", j)
		}
		if sh.done != nil {
			if _, in := sh.done.Find(fp); in {
				return rd.corrupt(i, "entry %d is also done", j)
			}
		}
		sh.add(newEntry("", ik, fp, data[:fpLen], []byte(data[fpLen:]), exp, token, state))
		rd.add(sh, exp)
	}
	return rd.err
}

// add counts a restored key expiring at exp.
func (rd *restorer) add(sh *shard, exp int64) {
	rd.c.count.Add(1)
	sh.lower(exp)
}

func (rd *restorer) intern(prefix string) string {
	if p, ok := rd.prefixes[prefix]; ok {
		return p
	}
	rd.prefixes[prefix] = prefix
	return prefix
}

// validPrefix checks a scope prefix as scopePrefix builds them.
func validPrefix(p string) error {
	if p == "\x00" {
		return nil
	}
	if len(p) < 2 || int(p[0]) != len(p)-1 {
		return errors.New("bad length")
	}
	if p[1:] == keystore.DefaultScope {
		return errors.New("the default scope named")
	}
	return keystore.ValidateScope(p[1:])
}

// splitKey splits an internal key into its scope prefix and key, and
// checks both.
func splitKey(ik string) (prefix, key string, ok bool) {
	if ik == "" {
		return "", "", false
	}
	n := 1
	if ik[0] != 0 {
		n += int(ik[0])
	}
	if n > len(ik) {
		return "", "", false
	}
	prefix, key = ik[:n], ik[n:]
	return prefix, key, validPrefix(prefix) == nil && idem.ValidateKey(key) == nil
}
