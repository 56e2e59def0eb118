package bucket

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"github.com/idem-go/idem/inbox/internal/engine/bloom"
	"github.com/idem-go/idem/sqldialect"
)

// Lookup filters: each new key is looked up in every live bucket, and with
// random keys each lookup is a B-tree descent to a random leaf. A bucket
// that no transaction can still write to is immutable until it is dropped,
// so a process may summarise it in a Bloom filter: a key the filter does
// not contain is certainly not in the bucket, and its lookup there is
// skipped. A filter never answers "absent" for a present key, so the inbox
// stays exact; a false "maybe" (0.1% at 16 bits a key) costs one lookup.
//
// Sealing. A writer records a key in the bucket of its clock (or the first
// one after it), and clocks are within a bucket width of the database's, so
// from two widths after a bucket's start no statement inserts into it. A
// transaction that inserted earlier may still be open, and its key would be
// missing from a filter read before it commits. So a filter is read only
// after a barrier that waits for every such transaction: on PostgreSQL
// LOCK TABLE … IN SHARE MODE (it conflicts with the lock every inserter
// holds until it ends), on SQLite taking the write lock (one writer at a
// time: whoever held it has committed or rolled back), on MySQL a locking
// read of the whole bucket (it waits for every uncommitted row).

// filterBitsPerKey sizes a sealed bucket's filter: a blocked filter
// (blockBloom, one cache miss a lookup) at 16 bits a key says "maybe" for
// about 0.1% of absent keys. Every new key is checked against every sealed
// bucket's filter, so with 30 live buckets a batch of 100 keys meets about
// 3 false "maybe"s, all looked up in one statement (lookupHits).
const filterBitsPerKey = 16

func newBloom(n int) *bloom.Filter { return bloom.New(int64(max(n, 64)), filterBitsPerKey) }

// filterRetry is how long a bucket whose filter failed to read is looked
// up directly before the read is tried again.
const filterRetry = time.Minute

// sealed reports whether no statement can insert into bucket s any more.
func (b *State) Sealed(s int64) bool { return s+2*b.Width <= b.NowS() }

// FiltersFor returns the filters of starts (nil entries for buckets
// without one).
func (b *State) FiltersFor(starts []int64) []*bloom.Filter {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]*bloom.Filter, len(starts))
	for i, s := range starts {
		out[i] = b.filters[s]
	}
	return out
}

// BuildFilters reads a filter for each sealed bucket that has none, within
// the memory budget. It runs before a transaction, never inside one.
func (b *State) BuildFilters(ctx context.Context) error {
	if b.h.FilterBytes <= 0 {
		return nil
	}
	starts, _ := b.Snapshot()
	have := b.FiltersFor(starts)
	for i, s := range starts {
		if have[i] != nil || !b.Sealed(s) {
			continue
		}
		b.mu.Lock()
		used, failed := b.filterBytes, b.filterFailed[s]
		used += b.RunBytes.Load() // one budget for both kinds
		b.mu.Unlock()
		if time.Since(failed) < filterRetry || used >= b.h.FilterBytes {
			continue
		}
		f, err := b.readFilter(ctx, s)
		if err != nil {
			// Without a filter the bucket is looked up directly: slower,
			// never wrong; the read is tried again after filterRetry (the
			// barrier may have timed out behind a packing, package bucketsql). A
			// dropped bucket is forgotten with the list.
			b.mu.Lock()
			b.filterFailed[s] = time.Now()
			b.mu.Unlock()
			b.h.Logger.DebugContext(ctx, "inbox: no lookup filter for bucket", "bucket", Name(b.Table, s), "err", err)
			continue
		}
		b.mu.Lock()
		var old []*sql.Stmt
		if b.filterBytes+f.Bytes() <= b.h.FilterBytes && b.filters[s] == nil && slices.Contains(b.starts, s) {
			b.filters[s] = f
			b.filterBytes += f.Bytes()
			old = b.newVersionLocked() // statements no longer look s up
		}
		b.mu.Unlock()
		closeStmts(old)
	}
	return nil
}

// readFilter waits out the transactions that may still be writing to
// bucket s (see the barrier above) and reads its digests into a filter.
func (b *State) readFilter(ctx context.Context, s int64) (*bloom.Filter, error) {
	name := Name(b.Table, s)
	tx, err := b.h.DB.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	switch b.D {
	case sqldialect.Postgres:
		if _, err := tx.ExecContext(ctx, `SET LOCAL lock_timeout = '10s'`); err != nil {
			return nil, err
		}
		if _, err := tx.ExecContext(ctx, `LOCK TABLE `+name+` IN SHARE MODE`); err != nil {
			return nil, err
		}
	case sqldialect.MySQL:
		if err := MySQLSealBarrier(ctx, tx, name); err != nil {
			return nil, err
		}
	case sqldialect.SQLite:
		// A write (of nothing) takes the write lock, or waits for it.
		if _, err := tx.ExecContext(ctx, `UPDATE `+b.Meta+` SET value = value WHERE name = 'salt'`); err != nil {
			return nil, err
		}
	}
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM `+name).Scan(&n); err != nil {
		return nil, err
	}
	f := newBloom(n)
	q := `SELECT d FROM ` + name
	if b.D == sqldialect.Postgres {
		q = `SELECT d::text FROM ` + name
	}
	start := time.Now()
	rows, err := tx.QueryContext(ctx, q)
	if err != nil {
		return nil, err
	}
	got := 0
	if err := b.EachDigest(rows, func(d [16]byte) { f.Add(d); got++ }); err != nil {
		return nil, err
	}
	if got != n {
		return nil, fmt.Errorf("bucket %s changed while sealed (%d rows, then %d)", name, n, got)
	}
	b.h.Logger.DebugContext(ctx, "inbox: lookup filter read", "bucket", name, "keys", n, "took", time.Since(start))
	return f, nil
}
