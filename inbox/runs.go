package inbox

import (
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Runs: the bucketed layout on SQLite, as a small LSM tree per bucket.
//
// With random keys a bucket's B-tree outgrows the page cache's locality:
// every key of a batch dirties its own 4 KiB leaf, and SQLite's WAL writes
// whole pages. So on SQLite the bucket table <table>_k<start> is only the
// bucket's HOT table: new keys go there, in the delivery's transaction as
// before, and while it holds a few thousand keys a batch's keys share its
// few dozen leaves. When this process has put runFlushKeys keys into it, a
// flush (a transaction of its own; SQLite has one writer, so nothing races
// it) copies the hot rows in digest order into a new immutable RUN table
//
//	<table>_k<start>_r<lo>_<hi>_<keys>
//
// and deletes them from the hot table. Runs of one bucket are merged in size
// tiers (runFanout runs of a tier into one of the next), and a bucket nobody
// writes to any more (sealed, filter.go) is merged into a single run. A run
// is written into an empty table in key order, so its pages are appended and
// full, and each key is rewritten O(log n) times, sequentially. Retention
// still drops whole buckets: their runs go with them (retire.go).
//
// Exactness. A key is looked up exactly, in the delivery's transaction, in
// the hot tables (the insert and its NOT EXISTS probes, bucketsql.go) and in
// the runs of a bucket whose filter says it may be there. Each process keeps
// one Bloom filter per bucket over all of the bucket's runs; a run never
// changes, and a merge moves keys between runs of one bucket without adding
// any, so the filter only ever grows by the keys of flushes. The meta row
// 'runs' holds a version that every flush, merge and drop raises, in the same
// transaction; each transaction that records keys reads it first and, when
// another process changed the runs, reads the new list (and the keys of runs
// it has not accounted for) before looking anything up. A crash mid-flush or
// mid-merge rolls the whole transaction back: the keys stay in the hot table
// or in the runs being merged.

// runsMeta is the meta row with the version of the run list; its presence
// marks a table whose buckets hold runs. runWidthMeta holds such a table's
// bucket width, under a name the first bucketed release does not read, so
// that release refuses the table (it would not look keys up in runs).
const (
	runsMeta     = "runs"
	runWidthMeta = "run_bucket_seconds"
)

// The flush size and the merge fanout (variables for tests), and a hook the
// crash test uses to die at a stage of a flush ("flush", "merge", "commit").
var (
	runFlushKeys = 4096
	runFanout    = 16
	runsTestHook func(stage string)
)

func runsStage(s string) {
	if runsTestHook != nil {
		runsTestHook(s)
	}
}

// run is a run table: the versions of the flushes it holds, and its keys.
type run struct{ lo, hi, n int64 }

func runName(t string, s int64, r run) string {
	return bucketName(t, s) + "_r" + strconv.FormatInt(r.lo, 10) + "_" + strconv.FormatInt(r.hi, 10) + "_" + strconv.FormatInt(r.n, 10)
}

// tier is the size class of a run of n keys: 0 up to runFlushKeys·fanout.
func tier(n int64) int {
	t := 0
	for x := n; x >= int64(runFlushKeys)*int64(runFanout); x /= int64(runFanout) {
		t++
	}
	return t
}

// runState is a process's view of a table's runs.
type runState struct {
	mu      sync.Mutex
	version int64 // of the list below; -1 before the first read
	runs    map[int64][]run
	// One filter per bucket over all its runs; a bucket with runs and no
	// filter (over the memory budget) is looked up for every key.
	filters map[int64]*runFilter
	bytes   atomic.Int64  // the filters' memory, counted in the budget
	pending map[int64]int // keys this process put in a hot table since it was flushed
	// expect sizes a new bucket's filter: the most keys a bucket held.
	expect int64
}

func newRunState() *runState {
	return &runState{version: -1, runs: map[int64][]run{}, filters: map[int64]*runFilter{}, pending: map[int64]int{}}
}

// runFilter is a Bloom filter over a bucket's runs that grows in parts.
type runFilter struct {
	parts []*blockBloom
	n     []int64 // keys in each part
	cap   []int64
}

func (f *runFilter) add(d [16]byte) {
	last := len(f.parts) - 1
	if last < 0 || f.n[last] >= f.cap[last] {
		var total int64
		for _, c := range f.cap {
			total += c
		}
		c := max(3*total, 1<<16)
		f.parts, f.n, f.cap = append(f.parts, newRunBloom(c)), append(f.n, 0), append(f.cap, c)
		last++
	}
	f.parts[last].add(d)
	f.n[last]++
}

// blockBloom is a blocked Bloom filter: a key's 7 bits are in one 64-byte
// block, so a lookup costs one cache miss (every key is checked against
// every bucket's filter). 20 bits a key: a bucket's filter has a few parts,
// and a "maybe" costs a lookup in every run of the bucket; about 3 false
// "maybe"s in 10,000 keys per part.
type blockBloom struct {
	blocks [][8]uint64
}

const runFilterBitsPerKey = 20

func newRunBloom(c int64) *blockBloom { return newBlockBloom(c, runFilterBitsPerKey) }

// newBlockBloom returns a blocked filter for c keys at bitsPerKey.
func newBlockBloom(c, bitsPerKey int64) *blockBloom {
	n := max((c*bitsPerKey+511)/512, 1)
	return &blockBloom{blocks: make([][8]uint64, n)}
}

// blockOf picks the block from the digest's hash bytes 8..16 and the bits
// from a mix of bytes 6..16 (bytes 0..6 are a UUIDv7's time).
func (f *blockBloom) blockOf(d [16]byte) (*[8]uint64, uint64) {
	a := binary.LittleEndian.Uint64(d[8:])
	hi, _ := bits.Mul64(a, uint64(len(f.blocks)))
	x := a ^ uint64(binary.LittleEndian.Uint16(d[6:]))<<48 ^ 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return &f.blocks[hi], x ^ x>>31
}

func (f *blockBloom) add(d [16]byte) {
	b, x := f.blockOf(d)
	for i := 0; i < 7; i++ {
		p := x >> (9 * i) & 511
		b[p/64] |= 1 << (p % 64)
	}
}

func (f *blockBloom) mayContain(d [16]byte) bool {
	b, x := f.blockOf(d)
	for i := 0; i < 7; i++ {
		p := x >> (9 * i) & 511
		if b[p/64]&(1<<(p%64)) == 0 {
			return false
		}
	}
	return true
}

func (f *blockBloom) bytes() int64 { return int64(len(f.blocks)) * 64 }

func (f *runFilter) mayContain(d [16]byte) bool {
	for _, p := range f.parts {
		if p.mayContain(d) {
			return true
		}
	}
	return false
}

func (f *runFilter) size() int64 {
	var b int64
	for _, p := range f.parts {
		b += p.bytes()
	}
	return b
}

// runVersion reads the version of the run list.
func runVersion(ctx context.Context, q querier, meta string) (int64, error) {
	return scanVersion(q.QueryRowContext(ctx, runVersionSQL(meta)))
}

func scanVersion(row *sql.Row) (int64, error) {
	var v []byte
	if err := row.Scan(&v); err != nil {
		return 0, err
	}
	return strconv.ParseInt(string(v), 10, 64)
}

func runVersionSQL(meta string) string {
	return `SELECT value FROM ` + meta + ` WHERE name = '` + runsMeta + `'`
}

func setRunVersion(ctx context.Context, tx *sql.Tx, meta string, v int64) error {
	_, err := tx.ExecContext(ctx, `UPDATE `+meta+` SET value = CAST(? AS BLOB) WHERE name = '`+runsMeta+`'`, strconv.FormatInt(v, 10))
	return err
}

// listRuns reads the run tables of t from the catalog, by bucket, each
// bucket's in ascending order of versions.
func listRuns(ctx context.Context, q querier, t string) (map[int64][]run, error) {
	prefix := t + "_k"
	// The bucket tables come too; parseRun keeps the runs.
	rows, err := q.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'table' AND substr(name, 1, length(?1)) = ?1`, prefix)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int64][]run{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, err
		}
		s, r, ok := parseRun(strings.TrimPrefix(name, prefix))
		if ok && runName(t, s, r) == name {
			out[s] = append(out[s], r)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, rs := range out {
		slices.SortFunc(rs, func(a, b run) int { return int(a.lo - b.lo) })
	}
	return out, nil
}

// parseRun parses "<start>_r<lo>_<hi>_<n>".
func parseRun(s string) (int64, run, bool) {
	start, rest, ok := strings.Cut(s, "_r")
	if !ok {
		return 0, run{}, false
	}
	f := strings.Split(rest, "_")
	if len(f) != 3 {
		return 0, run{}, false
	}
	var v [4]int64
	for i, x := range append([]string{start}, f...) {
		n, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return 0, run{}, false
		}
		v[i] = n
	}
	return v[0], run{lo: v[1], hi: v[2], n: v[3]}, true
}

// accounted reports whether the keys of r are all in a filter built from
// the runs old: r is one of them, or the merge of exactly those inside its
// versions (their key counts add up: a key is in one run only).
func accounted(old []run, r run) bool {
	var n int64
	for _, o := range old {
		if o.lo >= r.lo && o.hi <= r.hi {
			n += o.n
		}
	}
	return n == r.n
}

// syncRuns brings the cached run list up to the database's, inside q's
// transaction, reading into the filters the keys of runs it has not
// accounted for. It never holds the lock while it reads.
func (in *Inbox) syncRuns(ctx context.Context, q querier, b *buckets) error {
	rs := b.runs
	row := func() *sql.Row { return q.QueryRowContext(ctx, runVersionSQL(b.meta)) }
	if tx, ok := q.(*sql.Tx); ok {
		// Every transaction reads it: through the prepared statements.
		_, version := b.snapshot()
		if st := b.txStmt(ctx, tx, runVersionSQL(b.meta), version); st != nil {
			row = func() *sql.Row { return st.QueryRowContext(ctx) }
		}
	}
	v, err := scanVersion(row())
	if err != nil {
		return fmt.Errorf("inbox: read the run list version: %w", err)
	}
	for {
		rs.mu.Lock()
		if v == rs.version {
			rs.mu.Unlock()
			return nil
		}
		old, oldVersion := rs.runs, rs.version
		rs.mu.Unlock()
		all, err := listRuns(ctx, q, b.table)
		if err != nil {
			return fmt.Errorf("inbox: list run tables: %w", err)
		}
		read := map[int64][][16]byte{}
		for s, list := range all {
			for _, r := range list {
				if accounted(old[s], r) {
					continue
				}
				ds, err := b.readDigests(ctx, q, runName(b.table, s, r))
				if err != nil {
					return err
				}
				read[s] = append(read[s], ds...)
			}
		}
		rs.mu.Lock()
		if rs.version != oldVersion {
			rs.mu.Unlock()
			continue // another goroutine installed a list meanwhile
		}
		for s := range rs.filters {
			if len(all[s]) == 0 {
				in.dropRunFilterLocked(rs, s) // the bucket was dropped
			}
		}
		for s, ds := range read {
			in.addToFilterLocked(rs, s, ds, len(old[s]) == 0)
		}
		rs.runs, rs.version = all, v
		rs.mu.Unlock()
		return nil
	}
}

// addToFilterLocked adds ds to bucket s's filter, creating it when fresh
// (the bucket had no runs), within the memory budget; beyond it the bucket
// has none and is looked up directly.
func (in *Inbox) addToFilterLocked(rs *runState, s int64, ds [][16]byte, fresh bool) {
	f := rs.filters[s]
	var before int64
	if f == nil {
		if !fresh && len(rs.runs[s]) > 0 {
			return // has runs not in any filter: stays unfiltered
		}
		f = &runFilter{}
		if rs.expect > 0 {
			c := rs.expect + rs.expect/4
			f.parts, f.n, f.cap = []*blockBloom{newRunBloom(c)}, []int64{0}, []int64{c}
		}
		rs.filters[s] = f
	} else {
		before = f.size()
	}
	for _, d := range ds {
		f.add(d)
	}
	rs.bytes.Add(f.size() - before)
	if in.cfg.filterBytes <= 0 || rs.bytes.Load() > in.cfg.filterBytes {
		in.dropRunFilterLocked(rs, s)
	}
}

func (in *Inbox) dropRunFilterLocked(rs *runState, s int64) {
	if f := rs.filters[s]; f != nil {
		rs.bytes.Add(-f.size())
		delete(rs.filters, s)
	}
}

// readDigests reads every digest of a table, in digest order, a chunk of
// them as one hex string per query (a row apiece through database/sql costs
// more than the flush itself).
func (b *buckets) readDigests(ctx context.Context, q querier, table string) ([][16]byte, error) {
	const chunk = 1 << 15
	var ds [][16]byte
	after := []byte{}
	for {
		var h sql.NullString
		err := q.QueryRowContext(ctx, `SELECT group_concat(h, '') FROM (SELECT hex(d) AS h FROM `+table+` WHERE d > ? ORDER BY d LIMIT `+strconv.Itoa(chunk)+`)`, after).Scan(&h)
		if err != nil {
			return nil, fmt.Errorf("inbox: read run %s: %w", table, err)
		}
		raw, err := hex.DecodeString(h.String)
		if err != nil || len(raw)%16 != 0 {
			return nil, fmt.Errorf("inbox: read run %s: digests of %d bytes: %v", table, len(raw), err)
		}
		for i := 0; i < len(raw); i += 16 {
			ds = append(ds, [16]byte(raw[i:i+16]))
		}
		if len(raw) < 16*chunk {
			return ds, nil
		}
		after = raw[len(raw)-16:]
	}
}

// runsRecorded returns those of ds recorded in a run, inside tx, after
// bringing the run list up to date.
func (in *Inbox) runsRecorded(ctx context.Context, tx *sql.Tx, b *buckets, ds [][16]byte) (map[[16]byte]bool, error) {
	if err := in.syncRuns(ctx, tx, b); err != nil {
		return nil, err
	}
	rs := b.runs
	var q strings.Builder
	var args []any
	rs.mu.Lock()
	for s, list := range rs.runs {
		f := rs.filters[s]
		var hits []any
		for _, d := range ds {
			if f == nil || f.mayContain(d) {
				hits = append(hits, b.param(d))
			}
		}
		if len(hits) == 0 {
			continue
		}
		ph := "?" + strings.Repeat(",?", len(hits)-1)
		for _, r := range list {
			if q.Len() > 0 {
				q.WriteString(" UNION ALL ")
			}
			q.WriteString("SELECT d FROM " + runName(b.table, s, r) + " WHERE d IN (" + ph + ")")
			args = append(args, hits...)
		}
	}
	rs.mu.Unlock()
	if q.Len() == 0 {
		return nil, nil
	}
	rows, err := tx.QueryContext(ctx, q.String(), args...)
	if err != nil {
		return nil, in.bucketStatementError(ctx, err)
	}
	found := map[[16]byte]bool{}
	if err := b.eachDigest(rows, func(d [16]byte) { found[d] = true }); err != nil {
		return nil, in.bucketStatementError(ctx, err)
	}
	return found, nil
}

// runTables returns the names of every run, for a fingerprint lookup.
func (b *buckets) runTables() []string {
	if b.runs == nil {
		return nil
	}
	b.runs.mu.Lock()
	defer b.runs.mu.Unlock()
	var out []string
	for s, list := range b.runs.runs {
		for _, r := range list {
			out = append(out, runName(b.table, s, r))
		}
	}
	return out
}

// noteInserted counts keys put into bucket s's hot table.
func (rs *runState) noteInserted(s int64, n int) {
	rs.mu.Lock()
	rs.pending[s] += n
	rs.mu.Unlock()
}

// maintainRuns runs before a transaction: the first read of the run list,
// then a flush of the hot table this process filled, or the merge of a
// sealed bucket's runs into one. A failure is logged, not returned: the
// keys stay exact where they are, only slower to record.
func (in *Inbox) maintainRuns(ctx context.Context, b *buckets) error {
	rs := b.runs
	rs.mu.Lock()
	first := rs.version < 0
	rs.mu.Unlock()
	if first {
		if err := in.readTx(ctx, func(tx *sql.Tx) error { return in.syncRuns(ctx, tx, b) }); err != nil {
			return err
		}
	}
	starts, _ := b.snapshot()
	cur, ok := target(starts, b.current())
	rs.mu.Lock()
	var flush []int64
	for s, n := range rs.pending {
		switch {
		case s == cur && n >= runFlushKeys:
			flush = append(flush, s)
		case s != cur && (b.sealed(s) || !slices.Contains(starts, s)):
			flush = append(flush, s) // last flush and merge of a sealed bucket
		}
	}
	if len(flush) == 0 {
		for s, list := range rs.runs {
			if len(list) > 1 && b.sealed(s) && slices.Contains(starts, s) {
				flush = append(flush, s)
				break
			}
		}
	}
	rs.mu.Unlock()
	if !ok && len(flush) == 0 {
		return nil
	}
	for _, s := range flush {
		if err := in.flushRuns(ctx, b, s, s != cur); err != nil && ctx.Err() == nil {
			in.cfg.logger.WarnContext(ctx, "inbox: flush of the hot table into a run failed; keys stay in the hot table", "bucket", bucketName(in.cfg.table, s), "err", err)
		}
	}
	return nil
}

// flushRuns, in one transaction, moves bucket s's hot rows into a new run
// and merges runs of a tier that is full; all of them into one when final
// (the bucket is sealed).
func (in *Inbox) flushRuns(ctx context.Context, b *buckets, s int64, final bool) error {
	rs := b.runs
	hot := bucketName(b.table, s)
	return in.withRetry(ctx, func() error {
		tx, err := in.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		// A write first: the write lock, so the version read is the latest.
		if _, err := tx.ExecContext(ctx, `UPDATE `+b.meta+` SET value = value WHERE name = '`+runsMeta+`'`); err != nil {
			return err
		}
		if err := in.syncRuns(ctx, tx, b); err != nil {
			return err
		}
		ok, err := tableExists(ctx, tx, b.d, hot)
		if err != nil {
			return err
		}
		rs.mu.Lock()
		v, list := rs.version+1, slices.Clone(rs.runs[s])
		rs.mu.Unlock()
		if !ok { // dropped by retention
			rs.mu.Lock()
			delete(rs.pending, s)
			rs.mu.Unlock()
			return tx.Commit()
		}
		var n int64
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM `+hot).Scan(&n); err != nil {
			return err
		}
		var added [][16]byte
		changed := false
		if n > 0 && (final || n >= int64(runFlushKeys/2)) {
			added, err = b.readDigests(ctx, tx, hot)
			if err != nil {
				return err
			}
			r := run{lo: v, hi: v, n: n}
			if err := writeRun(ctx, tx, b.table, s, r, []string{hot}); err != nil {
				return err
			}
			runsStage("flush")
			if _, err := tx.ExecContext(ctx, `DELETE FROM `+hot); err != nil {
				return err
			}
			list, changed = append(list, r), true
		}
		for {
			var drop []run
			list, drop = mergeTier(list, final)
			if len(drop) == 0 {
				break
			}
			changed = true
			m := list[len(list)-1]
			var from []string
			for _, d := range drop {
				from = append(from, runName(b.table, s, d))
			}
			if err := writeRun(ctx, tx, b.table, s, m, from); err != nil {
				return err
			}
			runsStage("merge")
			for _, f := range from {
				if _, err := tx.ExecContext(ctx, `DROP TABLE `+f); err != nil {
					return err
				}
			}
		}
		if !changed {
			rs.mu.Lock()
			if final {
				delete(rs.pending, s)
			} else {
				rs.pending[s] = 0
			}
			rs.mu.Unlock()
			return nil // rolled back: nothing to write
		}
		if err := setRunVersion(ctx, tx, b.meta, v); err != nil {
			return err
		}
		runsStage("commit")
		if err := tx.Commit(); err != nil {
			return &CommitError{Key: "flush of " + hot, Err: err}
		}
		rs.mu.Lock()
		defer rs.mu.Unlock()
		if rs.version == v-1 {
			var total int64
			for _, r := range list {
				total += r.n
			}
			rs.expect = max(rs.expect, total)
			in.addToFilterLocked(rs, s, added, len(rs.runs[s]) == 0)
			runs := maps(rs.runs)
			runs[s] = list
			rs.runs, rs.version = runs, v
		}
		if final {
			delete(rs.pending, s)
		} else {
			rs.pending[s] = 0
		}
		return nil
	})
}

// maps copies m (the run list is replaced, never changed in place, so a
// sync can compare against the list it started from).
func maps(m map[int64][]run) map[int64][]run {
	out := make(map[int64][]run, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}

// mergeTier finds one merge to do in list (ascending): the runs of the
// lowest full tier, or all of them when final. It returns the new list, the
// merged run last, and the runs it replaces; none when there is nothing to
// merge.
func mergeTier(list []run, final bool) ([]run, []run) {
	if final {
		if len(list) < 2 {
			return list, nil
		}
		return []run{merged(list)}, list
	}
	byTier := map[int][]run{}
	for _, r := range list {
		byTier[tier(r.n)] = append(byTier[tier(r.n)], r)
	}
	for t := 0; t <= 32; t++ {
		if rs := byTier[t]; len(rs) >= runFanout {
			var keep []run
			for _, r := range list {
				if !slices.Contains(rs, r) {
					keep = append(keep, r)
				}
			}
			return append(keep, merged(rs)), rs
		}
	}
	return list, nil
}

func merged(rs []run) run {
	m := run{lo: rs[0].lo, hi: rs[0].hi}
	for _, r := range rs {
		m.lo, m.hi, m.n = min(m.lo, r.lo), max(m.hi, r.hi), m.n+r.n
	}
	return m
}

// writeRun creates run r of bucket s and fills it, in digest order, from
// the tables from.
func writeRun(ctx context.Context, tx *sql.Tx, t string, s int64, r run, from []string) error {
	name := runName(t, s, r)
	if _, err := tx.ExecContext(ctx, `CREATE TABLE `+name+` (d BLOB PRIMARY KEY, fingerprint BLOB, idem_key TEXT) WITHOUT ROWID`); err != nil {
		return fmt.Errorf("inbox: create run %s: %w", name, err)
	}
	var q strings.Builder
	for i, f := range from {
		if i > 0 {
			q.WriteString(" UNION ALL ")
		}
		q.WriteString("SELECT d, fingerprint, idem_key FROM " + f)
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO `+name+` (d, fingerprint, idem_key) `+q.String()+` ORDER BY 1`)
	if err != nil {
		return fmt.Errorf("inbox: fill run %s: %w", name, err)
	}
	if n, err := res.RowsAffected(); err != nil || n != r.n {
		return fmt.Errorf("inbox: fill run %s: %d rows, want %d: %w", name, n, r.n, errors.Join(err, errBucketsChanged))
	}
	return nil
}

// dropRuns drops, inside retention's transaction, the runs of bucket s.
func (in *Inbox) dropRuns(ctx context.Context, tx *sql.Tx, b *buckets, s int64) error {
	if b.runs == nil {
		return nil
	}
	all, err := listRuns(ctx, tx, b.table)
	if err != nil {
		return err
	}
	if len(all[s]) == 0 {
		return nil
	}
	for _, r := range all[s] {
		if _, err := tx.ExecContext(ctx, `DROP TABLE IF EXISTS `+runName(b.table, s, r)); err != nil {
			return err
		}
	}
	v, err := runVersion(ctx, tx, b.meta)
	if err != nil {
		return err
	}
	return setRunVersion(ctx, tx, b.meta, v+1)
}
