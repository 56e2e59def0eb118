package bucket

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idem-go/idem/inbox/internal/engine"
	"github.com/idem-go/idem/inbox/internal/engine/bloom"
	"github.com/idem-go/idem/internal/digest"
	"github.com/idem-go/idem/sqldialect"
)

// State is the state of a table in the bucketed layout, shared by the
// Inbox's calls. Only the list of bucket tables and the clock offset
// change after ready.
type State struct {
	D     sqldialect.Dialect
	Table string // the rows table's name: buckets are table_k<start>
	Meta  string
	Salt  []byte
	Width int64 // seconds
	// legacy: the rows table exists (frozen): it is read, never written.
	// It is cleared, with a new version, when a Sweep has dropped it.
	Legacy atomic.Bool

	offsetUS atomic.Int64 // database clock − local clock, µs
	syncedNS atomic.Int64 // local time of the last offset sync

	mu      sync.Mutex
	starts  []int64 // bucket starts (Unix s), ascending
	version int
	sql     map[string]string // built statements, for this version
	// SQLite: statements of this version prepared on the pool, and those
	// that ran unprepared and are prepared before the next transaction.
	prepared map[string]*sql.Stmt
	missed   map[string]bool
	// Lookup filters of sealed buckets (filter.go), within the budget.
	filters      map[int64]*bloom.Filter
	filterBytes  int64
	filterFailed map[int64]time.Time // when a filter last failed to read
	// isoVar: MySQL's session variable of the isolation level
	// (package bucketmysql).
	IsoVar string
	// HasRuns: a SQLite table whose buckets hold runs (package runs);
	// RunBytes is the runs' filters' memory, in the same budget.
	HasRuns  bool
	RunBytes atomic.Int64
	h        *engine.Host
}

// txStmt returns q prepared for tx if it is cached for version (SQLite
// and MySQL), else nil and remembers q for PrepareMissed. The statement is
// bound to tx while b.mu is held, and retired statements leave the cache
// under b.mu, so a statement is never handed out closed; one already bound
// to a transaction stays usable (database/sql counts it as a dependent).
//
// Retired statements are closed after b.mu is unlocked (closeStmts), never
// under it: closing one waits for each connection it was prepared on, and
// on SQLite such a connection may be inside a BEGIN that waits, up to the
// busy timeout, for the writer, whose transaction may itself be waiting for
// b.mu (a flake run's stack dump showed exactly that cycle).
func (b *State) TxStmt(ctx context.Context, tx *sql.Tx, q string, version int) *sql.Stmt {
	if b.D == sqldialect.Postgres {
		return nil // pgx caches prepared statements itself
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if version != b.version {
		return nil
	}
	if st, ok := b.prepared[q]; ok {
		return tx.StmtContext(ctx, st)
	}
	if len(b.missed) < engine.MaxCachedStmts {
		if b.missed == nil {
			b.missed = map[string]bool{}
		}
		b.missed[q] = true
	}
	return nil
}

// PrepareMissed prepares, outside any transaction, the statements txStmt
// found missing.
func (b *State) PrepareMissed(ctx context.Context, p engine.Preparer) {
	b.mu.Lock()
	if len(b.missed) == 0 || p == nil {
		b.mu.Unlock()
		return
	}
	version := b.version
	var qs []string
	for q := range b.missed {
		qs = append(qs, q)
	}
	clear(b.missed)
	b.mu.Unlock()
	for _, q := range qs {
		st, err := p.PrepareContext(ctx, q)
		if err != nil {
			continue
		}
		b.mu.Lock()
		keep := b.version == version && len(b.prepared) < engine.MaxCachedStmts && b.prepared[q] == nil
		if keep {
			if b.prepared == nil {
				b.prepared = map[string]*sql.Stmt{}
			}
			b.prepared[q] = st
		}
		b.mu.Unlock()
		if !keep {
			_ = st.Close()
		}
	}
}

// Digest is the 16 bytes stored for (consumer, key): internal/digest's
// Scoped under the table's secret salt (a UUIDv7 key's time first).
func (b *State) Digest(consumer, key string) [16]byte { return digest.Scoped(b.Salt, consumer, key) }

// Param is d as the driver binds it: uuid text on PostgreSQL, bytes
// elsewhere.
func (b *State) Param(d [16]byte) any { return digest.Param(b.D, d) }

// SetStarts installs a new bucket list; it reports whether it changed.
func (b *State) SetStarts(s []int64) bool {
	b.mu.Lock()
	if slices.Equal(s, b.starts) {
		b.mu.Unlock()
		return false
	}
	b.starts = s
	for st, f := range b.filters {
		if !slices.Contains(s, st) { // dropped
			b.filterBytes -= f.Bytes()
			delete(b.filters, st)
		}
	}
	for st := range b.filterFailed {
		if !slices.Contains(s, st) {
			delete(b.filterFailed, st)
		}
	}
	old := b.newVersionLocked()
	b.mu.Unlock()
	closeStmts(old)
	return true
}

// ForgetLegacy records that the rows table was dropped.
func (b *State) ForgetLegacy() {
	b.mu.Lock()
	b.Legacy.Store(false)
	old := b.newVersionLocked()
	b.mu.Unlock()
	closeStmts(old)
}

// newVersionLocked starts a new version of the statements and returns the
// retired ones, for the caller to close once it has unlocked b.mu (see
// txStmt).
func (b *State) newVersionLocked() []*sql.Stmt {
	b.version, b.sql = b.version+1, nil
	var old []*sql.Stmt
	for q, st := range b.prepared {
		old = append(old, st)
		delete(b.prepared, q)
	}
	clear(b.missed)
	return old
}

// closeStmts closes retired statements; call it with b.mu unlocked.
func closeStmts(sts []*sql.Stmt) {
	for _, st := range sts {
		_ = st.Close()
	}
}

// snapshot returns the bucket list and its version.
func (b *State) Snapshot() ([]int64, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.starts, b.version
}

// nowS is the database clock in Unix seconds, from the local clock and
// the last measured offset.
func (b *State) NowS() int64 {
	return (time.Now().UnixMicro() + b.offsetUS.Load()) / 1e6
}

// current is the start of the bucket that keys arriving now go to.
func (b *State) Current() int64 {
	n := b.NowS()
	return n - ((n%b.Width)+b.Width)%b.Width
}

// clockSyncEvery bounds how stale the database clock offset may be.
const clockSyncEvery = 30 * time.Second

func (b *State) SyncClock(ctx context.Context, q engine.Querier) error {
	before := time.Now()
	var us int64
	if err := q.QueryRowContext(ctx, `SELECT `+engine.DBNowUS(b.D)).Scan(&us); err != nil {
		return err
	}
	after := time.Now()
	mid := before.UnixMicro() + after.Sub(before).Microseconds()/2
	b.offsetUS.Store(us - mid)
	b.syncedNS.Store(after.UnixNano())
	return nil
}

// target is the bucket a key arriving in bucket cur is recorded in: cur
// itself, or, when cur has no table, the oldest bucket after it (a writer
// whose clock is behind the others' never creates a bucket older than the
// newest one; recording a key in a later bucket only keeps it longer).
// ok is false when there is none.
func Target(starts []int64, cur int64) (int64, bool) {
	i, _ := slices.BinarySearch(starts, cur)
	if i == len(starts) {
		return 0, false
	}
	return starts[i], true
}

// WriteTarget is what a Record writes against: the bucket list, its
// version, and the bucket that keys arriving now are recorded in (see
// Target). When there is none, the clock crossed into a bucket not
// created yet (ensureBuckets makes the next one ahead, so only a long
// transaction gets here) and the error is engine.ErrBucketsChanged: the
// transaction is rerun on a fresh list.
func (b *State) WriteTarget() (starts []int64, version int, cur int64, err error) {
	starts, version = b.Snapshot()
	cur, ok := Target(starts, b.Current())
	if !ok {
		return nil, 0, 0, engine.ErrBucketsChanged
	}
	return starts, version, cur, nil
}

// memo returns the statement cached under ck for version, building it
// once.
func (b *State) Memo(ck string, version int, build func() string) string {
	if s, ok := b.CachedSQL(ck, version); ok {
		return s
	}
	return b.StoreSQL(ck, version, build())
}

// CachedSQL returns the statement cached under ck, if it was built for
// version.
func (b *State) CachedSQL(ck string, version int) (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.version != version {
		return "", false
	}
	s, ok := b.sql[ck]
	return s, ok
}

// StoreSQL caches s under ck if the list is still at version, and returns
// it.
func (b *State) StoreSQL(ck string, version int, s string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.version == version {
		if b.sql == nil {
			b.sql = map[string]string{}
		}
		b.sql[ck] = s
	}
	return s
}

// EachDigest calls f with each row's digest (the only column) and closes
// rows.
func (b *State) EachDigest(rows *sql.Rows, f func(d [16]byte)) error {
	defer rows.Close()
	for rows.Next() {
		var d [16]byte
		if err := b.scanDigest(rows, &d); err != nil {
			return err
		}
		f(d)
	}
	return rows.Err()
}

func (b *State) scanDigest(rows *sql.Rows, d *[16]byte) error {
	if b.D == sqldialect.Postgres {
		var s string
		if err := rows.Scan(&s); err != nil {
			return err
		}
		var err error
		*d, err = digest.ParseText(s)
		return err
	}
	var raw []byte
	if err := rows.Scan(&raw); err != nil {
		return err
	}
	if len(raw) != 16 {
		return fmt.Errorf("digest of %d bytes", len(raw))
	}
	copy(d[:], raw)
	return nil
}

// TxQuery runs q in tx, prepared when cached for version (txStmt).
func (b *State) TxQuery(ctx context.Context, tx *sql.Tx, q string, version int, args []any) (*sql.Rows, error) {
	if st := b.TxStmt(ctx, tx, q, version); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return tx.QueryContext(ctx, q, args...)
}

// Exec runs q in tx, prepared when cached for version (TxStmt).
func (b *State) Exec(ctx context.Context, tx *sql.Tx, q string, version int, args []any) error {
	var err error
	if st := b.TxStmt(ctx, tx, q, version); st != nil {
		_, err = st.ExecContext(ctx, args...)
	} else {
		_, err = tx.ExecContext(ctx, q, args...)
	}
	return err
}
