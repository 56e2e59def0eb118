package inbox

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idem-go/idem/internal/uuidtext"
	"github.com/idem-go/idem/sqldialect"
)

// Layout is how the key table stores keys.
type Layout int

const (
	// LayoutBuckets (the default for new tables)
	// stores a 16-byte keyed digest of (consumer, key) in one table per
	// time bucket of first arrival, <table>_k<unix start>, keyed by the
	// digest alone, and retires keys by dropping whole buckets. A key is
	// looked up in every live bucket, so a duplicate that arrives buckets
	// after its first delivery is still found. See docs/inbox.md, "At
	// scale".
	LayoutBuckets Layout = iota + 1
	// LayoutRows is the layout of releases before issue 14: one table of
	// (consumer, idem_key, fingerprint, processed_at) rows, retired by
	// Sweep's row deletes. Tables made by earlier releases keep it until
	// [Inbox.MigrateLayout].
	LayoutRows
)

func (l Layout) String() string {
	switch l {
	case LayoutBuckets:
		return "buckets"
	case LayoutRows:
		return "rows"
	}
	return "Layout(" + strconv.Itoa(int(l)) + ")"
}

// errBucketsChanged: a bucket table the statement named was dropped, or a
// new one appeared; the transaction is rerun with the fresh list.
var errBucketsChanged = errors.New("inbox: bucket tables changed; retrying")

// errLayoutChanged: the rows table refused the insert because it was
// migrated to the bucketed layout; the transaction is rerun on it.
var errLayoutChanged = errors.New("inbox: key table was migrated to the bucketed layout; retrying")

// buckets is the state of a table in the bucketed layout, shared by the
// Inbox's calls. Only the list of bucket tables and the clock offset
// change after ready.
type buckets struct {
	d     sqldialect.Dialect
	table string // the rows table's name: buckets are table_k<start>
	meta  string
	salt  []byte
	width int64 // seconds
	// legacy: the rows table exists (frozen): it is read, never written.
	// It is cleared, with a new version, when a Sweep has dropped it.
	legacy atomic.Bool

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
	filters      map[int64]*bloom
	filterBytes  int64
	filterFailed map[int64]time.Time // when a filter last failed to read
	// isoVar: MySQL's session variable of the isolation level
	// (bucketmysql.go).
	isoVar string
	// runs: SQLite tables whose buckets hold runs (runs.go); nil otherwise.
	runs *runState
}

// txStmt returns q prepared for tx if it is cached for version (SQLite
// and MySQL), else nil and remembers q for prepareMissed. The statement is
// bound to tx while b.mu is held, and retired statements are closed under
// b.mu too, so a statement is never handed out closed; one already bound
// to a transaction stays usable (database/sql counts it as a dependent).
func (b *buckets) txStmt(ctx context.Context, tx *sql.Tx, q string, version int) *sql.Stmt {
	if b.d == sqldialect.Postgres {
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
	if len(b.missed) < maxCachedStmts {
		if b.missed == nil {
			b.missed = map[string]bool{}
		}
		b.missed[q] = true
	}
	return nil
}

// prepareMissed prepares, outside any transaction, the statements txStmt
// found missing.
func (b *buckets) prepareMissed(ctx context.Context, p preparer) {
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
		if b.version != version || len(b.prepared) >= maxCachedStmts || b.prepared[q] != nil {
			_ = st.Close()
		} else {
			if b.prepared == nil {
				b.prepared = map[string]*sql.Stmt{}
			}
			b.prepared[q] = st
		}
		b.mu.Unlock()
	}
}

func metaTableName(t string) string       { return t + "_meta" }
func bucketName(t string, s int64) string { return t + "_k" + strconv.FormatInt(s, 10) }
func frozenName(t string) string          { return tableRef(t) + "_frozen" }

// digest is the 16 bytes stored for (consumer, key): SHA-256 of the
// table's secret salt, the consumer's length, the consumer and the key.
// When the key is a canonical UUIDv7, its 48-bit millisecond time replaces
// the first 6 bytes, so that time-ordered keys stay ordered in the B-tree
// (appends at its right edge, as before) and 80 bits of the hash remain.
func (b *buckets) digest(consumer, key string) [16]byte {
	var buf [16 + binary.MaxVarintLen64 + 2*255]byte
	p := append(buf[:0], b.salt...)
	p = binary.AppendUvarint(p, uint64(len(consumer)))
	p = append(p, consumer...)
	p = append(p, key...)
	sum := sha256.Sum256(p)
	var d [16]byte
	copy(d[:], sum[:16])
	if ms, ok := uuidV7Millis(key); ok {
		var t [8]byte
		binary.BigEndian.PutUint64(t[:], ms)
		copy(d[:6], t[2:])
		copy(d[6:], sum[:10])
	}
	return d
}

// uuidV7Millis returns the millisecond time of a canonical UUIDv7 text.
func uuidV7Millis(k string) (uint64, bool) {
	if len(k) != 36 || k[8] != '-' || k[13] != '-' || k[18] != '-' || k[23] != '-' || k[14] != '7' {
		return 0, false
	}
	switch k[19] {
	case '8', '9', 'a', 'b', 'A', 'B':
	default:
		return 0, false
	}
	var ms uint64
	for _, c := range []byte(k[:8] + k[9:13]) {
		v, ok := hexVal(c)
		if !ok {
			return 0, false
		}
		ms = ms<<4 | uint64(v)
	}
	return ms, true
}

func hexVal(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// param is d as the driver binds it: uuid text on PostgreSQL, bytes
// elsewhere.
func (b *buckets) param(d [16]byte) any {
	if b.d == sqldialect.Postgres {
		return uuidtext.Format(d)
	}
	return d[:]
}

// bucketSchema is the schema of a new table in the bucketed layout: the
// meta table with the table's salt and bucket width. Bucket tables are
// made by the Inbox as time reaches them.
func bucketSchema(d sqldialect.Dialect, t string, width time.Duration) []string {
	m := metaTableName(t)
	salt := make([]byte, 16)
	_, _ = rand.Read(salt)
	w := strconv.FormatInt(int64(width/time.Second), 10)
	switch d {
	case sqldialect.Postgres:
		return []string{
			`CREATE TABLE IF NOT EXISTS ` + m + ` (name text PRIMARY KEY, value bytea NOT NULL)`,
			`INSERT INTO ` + m + ` (name, value) VALUES ('salt', '\x` + hex.EncodeToString(salt) + `'::bytea), ('bucket_seconds', convert_to('` + w + `', 'UTF8')) ON CONFLICT (name) DO NOTHING`,
		}
	case sqldialect.SQLite:
		// Buckets of runs (runs.go): the width under runWidthMeta.
		return []string{
			`CREATE TABLE IF NOT EXISTS ` + m + ` (name TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID`,
			`INSERT INTO ` + m + ` (name, value) VALUES ('salt', x'` + hex.EncodeToString(salt) + `'), ('` + runWidthMeta + `', CAST('` + w + `' AS BLOB)), ('` + runsMeta + `', CAST('0' AS BLOB)) ON CONFLICT (name) DO NOTHING`,
		}
	case sqldialect.MySQL:
		return mysqlBucketSchema(m, salt, w)
	}
	return nil
}

// bucketTableSQL creates the bucket table starting at s.
func bucketTableSQL(d sqldialect.Dialect, t string, s int64) string {
	n := bucketName(t, s)
	switch d {
	case sqldialect.Postgres:
		// uuid, not bytea: 16 bytes with no length header, so the heap
		// tuple and the index entry are those of a bare uuid table (a
		// NULL fingerprint and key cost nothing: the null bitmap fits in
		// the header's padding).
		return `CREATE TABLE IF NOT EXISTS ` + n + ` (d uuid PRIMARY KEY, fingerprint bytea, idem_key text)`
	case sqldialect.MySQL:
		return mysqlBucketTableSQL(n)
	default:
		return `CREATE TABLE IF NOT EXISTS ` + n + ` (d BLOB PRIMARY KEY, fingerprint BLOB, idem_key TEXT) WITHOUT ROWID`
	}
}

// dbNowUS is the database clock in Unix microseconds.
func dbNowUS(d sqldialect.Dialect) string {
	switch d {
	case sqldialect.Postgres:
		return `(extract(epoch FROM clock_timestamp()) * 1000000)::bigint`
	case sqldialect.MySQL:
		return mysqlNowUS
	}
	return `(` + sqliteNowMS + ` * 1000)`
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// exists reports which of the named tables exist.
func tableExists(ctx context.Context, q querier, d sqldialect.Dialect, name string) (bool, error) {
	var n int
	var err error
	switch d {
	case sqldialect.Postgres:
		err = q.QueryRowContext(ctx, `SELECT count(*) FROM pg_class WHERE oid = to_regclass($1::text)`, name).Scan(&n)
	case sqldialect.SQLite:
		err = q.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, name).Scan(&n)
	case sqldialect.MySQL:
		return mysqlTableExists(ctx, q, name)
	default:
		return false, nil
	}
	return n > 0, err
}

// loadBuckets reads the meta table of t; nil if there is none.
func loadBuckets(ctx context.Context, q querier, d sqldialect.Dialect, t string) (*buckets, error) {
	m := metaTableName(t)
	ok, err := tableExists(ctx, q, d, m)
	if err != nil || !ok {
		return nil, err
	}
	b := &buckets{d: d, table: t, meta: m, filters: map[int64]*bloom{}, filterFailed: map[int64]time.Time{}}
	rows, err := q.QueryContext(ctx, `SELECT name, value FROM `+m)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var v []byte
		if err := rows.Scan(&name, &v); err != nil {
			return nil, err
		}
		switch name {
		case "salt":
			b.salt = v
		case "bucket_seconds", runWidthMeta:
			b.width, _ = strconv.ParseInt(string(v), 10, 64)
		case runsMeta:
			if d == sqldialect.SQLite {
				b.runs = newRunState()
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(b.salt) < 16 || b.width <= 0 {
		return nil, fmt.Errorf("inbox: table %s has no salt or bucket width: apply SchemaSQL again: %w", m, ErrUnsafeTable)
	}
	legacy, err := tableExists(ctx, q, d, t)
	if err != nil {
		return nil, err
	}
	b.legacy.Store(legacy)
	if d == sqldialect.MySQL {
		if b.isoVar, err = mysqlIsolationVar(ctx, q); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// list reads the bucket tables from the catalog and checks each one's
// primary key: exactly (d), and no other unique index.
func (b *buckets) list(ctx context.Context, q querier) ([]int64, error) {
	schema, name := splitTable(b.table)
	prefix := name + "_k"
	var rows *sql.Rows
	var err error
	switch b.d {
	case sqldialect.Postgres:
		ns := `current_schema()`
		args := []any{prefix}
		if schema != "" {
			ns, args = `$2`, append(args, schema)
		}
		rows, err = q.QueryContext(ctx, `SELECT c.relname::text,
	(SELECT count(*) FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0] JOIN pg_type ty ON ty.oid = a.atttypid
	  WHERE i.indrelid = c.oid AND i.indisunique AND i.indnkeyatts = 1 AND i.indpred IS NULL AND i.indexprs IS NULL AND i.indimmediate AND i.indisvalid
	    AND a.attname = 'd' AND ty.typname = 'uuid') >= 1
	AND NOT EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisunique
	  AND NOT (i.indnkeyatts = 1 AND i.indnatts = 1 AND i.indpred IS NULL AND i.indexprs IS NULL AND i.indkey[0] = (SELECT a.attnum FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'd')))
	AND c.relpersistence = 'p'
	AND NOT EXISTS (SELECT 1 FROM pg_trigger tg WHERE tg.tgrelid = c.oid AND NOT tg.tgisinternal AND tg.tgtype & 2 = 2)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = `+ns+` AND c.relkind = 'r' AND starts_with(c.relname::text, $1)`, args...)
	case sqldialect.SQLite:
		rows, err = q.QueryContext(ctx, `SELECT m.name,
	(SELECT count(*) FROM pragma_index_list(m.name) l WHERE l."unique" = 1) = 1
	AND (SELECT count(*) FROM pragma_index_list(m.name) l, pragma_index_xinfo(l.name) x
	     WHERE l."unique" = 1 AND l.partial = 0 AND x.key = 1 AND x.name = 'd' AND x.coll = 'BINARY'
	       AND (SELECT count(*) FROM pragma_index_xinfo(l.name) y WHERE y.key = 1) = 1) = 1
	AND NOT EXISTS (SELECT 1 FROM sqlite_master tr WHERE tr.type = 'trigger' AND tr.tbl_name = m.name)
FROM sqlite_master m WHERE m.type = 'table' AND substr(m.name, 1, length(?1)) = ?1`, prefix)
	case sqldialect.MySQL:
		rows, err = b.mysqlList(ctx, q, prefix)
	}
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var starts []int64
	for rows.Next() {
		var n string
		var good bool
		if err := rows.Scan(&n, &good); err != nil {
			return nil, err
		}
		s, perr := strconv.ParseInt(strings.TrimPrefix(n, prefix), 10, 64)
		if perr != nil || n != prefix+strconv.FormatInt(s, 10) {
			continue // another table whose name starts alike
		}
		if !good {
			return nil, fmt.Errorf("inbox: bucket table %s must have a unique index on (d) and no other unique index (uuid on PostgreSQL, BLOB with BINARY collation on SQLite, BINARY(16) in InnoDB on MySQL), and no triggers: keys in it could be recorded twice or skipped: %w", n, ErrUnsafeTable)
		}
		starts = append(starts, s)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.Sort(starts)
	return starts, nil
}

// setStarts installs a new bucket list; it reports whether it changed.
func (b *buckets) setStarts(s []int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if slices.Equal(s, b.starts) {
		return false
	}
	b.starts = s
	for st, f := range b.filters {
		if !slices.Contains(s, st) { // dropped
			b.filterBytes -= f.bytes()
			delete(b.filters, st)
		}
	}
	for st := range b.filterFailed {
		if !slices.Contains(s, st) {
			delete(b.filterFailed, st)
		}
	}
	b.newVersionLocked()
	return true
}

// forgetLegacy records that the rows table was dropped.
func (b *buckets) forgetLegacy() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.legacy.Store(false)
	b.newVersionLocked()
}

func (b *buckets) newVersionLocked() {
	b.version, b.sql = b.version+1, nil
	for q, st := range b.prepared {
		_ = st.Close() // see txStmt
		delete(b.prepared, q)
	}
	clear(b.missed)
}

// snapshot returns the bucket list and its version.
func (b *buckets) snapshot() ([]int64, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.starts, b.version
}

// nowS is the database clock in Unix seconds, from the local clock and
// the last measured offset.
func (b *buckets) nowS() int64 {
	return (time.Now().UnixMicro() + b.offsetUS.Load()) / 1e6
}

// current is the start of the bucket that keys arriving now go to.
func (b *buckets) current() int64 {
	n := b.nowS()
	return n - ((n%b.width)+b.width)%b.width
}

// clockSyncEvery bounds how stale the database clock offset may be.
const clockSyncEvery = 30 * time.Second

func (b *buckets) syncClock(ctx context.Context, q querier) error {
	before := time.Now()
	var us int64
	if err := q.QueryRowContext(ctx, `SELECT `+dbNowUS(b.d)).Scan(&us); err != nil {
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
func target(starts []int64, cur int64) (int64, bool) {
	i, _ := slices.BinarySearch(starts, cur)
	if i == len(starts) {
		return 0, false
	}
	return starts[i], true
}

// ensureBuckets makes sure, before a transaction starts, that the bucket
// keys go to exists and, when that is the current one, that the next one
// does too, and that the clock offset is fresh. It runs DDL in its own
// short transactions, never inside the caller's (SQLite pools of one
// connection would wait on themselves).
//
// Why a cached list of buckets is enough: tables are only ever created
// forward (the current bucket and the next, and never one older than the
// newest that exists), and every writer knows the bucket after its own. A
// key is therefore written only into a bucket that every writer whose
// clock is less than one bucket width apart already lists, and probes.
// The clocks are the database's, measured every clockSyncEvery.
func (in *Inbox) ensureBuckets(ctx context.Context) error {
	b := in.bl.Load()
	if b == nil {
		return nil
	}
	if in.stmts != nil {
		b.prepareMissed(ctx, in.stmts.p)
	}
	if time.Since(time.Unix(0, b.syncedNS.Load())) > clockSyncEvery {
		if err := in.readTx(ctx, func(tx *sql.Tx) error { return b.syncClock(ctx, tx) }); err != nil {
			return fmt.Errorf("inbox: read the database clock: %w", err)
		}
	}
	if b.runs != nil {
		if err := in.maintainRuns(ctx, b); err != nil {
			return err
		}
	}
	cur := b.current()
	starts, _ := b.snapshot()
	if t, ok := target(starts, cur); ok && t != starts[len(starts)-1] {
		return in.buildFilters(ctx, b) // a later bucket is known too
	}
	if err := in.refreshBuckets(ctx); err != nil && !errors.Is(err, errBucketsChanged) {
		return err
	}
	starts, _ = b.snapshot()
	var create []int64
	if len(starts) == 0 || cur >= starts[len(starts)-1] {
		for _, s := range []int64{cur, cur + b.width} {
			if !slices.Contains(starts, s) {
				create = append(create, s)
			}
		}
	}
	if len(create) == 0 {
		return in.buildFilters(ctx, b)
	}
	err := in.withRetry(ctx, func() error {
		tx, err := in.db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("inbox: create bucket: begin: %w", err)
		}
		defer tx.Rollback()
		for _, s := range create {
			if _, err := tx.ExecContext(ctx, bucketTableSQL(in.dialect, in.cfg.table, s)); err != nil {
				if in.dialect.IsUniqueViolation(err) {
					// Two processes created the same bucket at once
					// (PostgreSQL's catalog). It exists: retry reads it.
					return errBucketsChanged
				}
				return fmt.Errorf("inbox: create bucket %s: %w", bucketName(in.cfg.table, s), err)
			}
		}
		return tx.Commit()
	})
	if err != nil {
		return err
	}
	if err := in.refreshBuckets(ctx); err != nil && !errors.Is(err, errBucketsChanged) {
		return err
	}
	return in.buildFilters(ctx, b)
}

// refreshBuckets reads the bucket list again; it reports errBucketsChanged
// when it differs from the cached one.
func (in *Inbox) refreshBuckets(ctx context.Context) error {
	b := in.bl.Load()
	var starts []int64
	err := in.readTx(ctx, func(tx *sql.Tx) (err error) {
		starts, err = b.list(ctx, tx)
		return err
	})
	if err != nil {
		return fmt.Errorf("inbox: list bucket tables: %w", err)
	}
	if b.setStarts(starts) {
		return errBucketsChanged
	}
	return nil
}

// readTx runs f in a short transaction of its own.
func (in *Inbox) readTx(ctx context.Context, f func(tx *sql.Tx) error) error {
	tx, err := in.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := f(tx); err != nil {
		return err
	}
	return tx.Commit()
}
