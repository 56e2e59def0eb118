package inbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idem-go/idem/sqldialect"
)

// The bucketed layout on MySQL and MariaDB (InnoDB). Bucket tables are
// (d BINARY(16) PRIMARY KEY, fingerprint VARBINARY(64), idem_key
// VARBINARY(255)); a batch costs two statements:
//
//	SELECT 0, @@isolation
//	UNION ALL SELECT 1, d FROM <current bucket> WHERE d IN (…)
//	UNION ALL (SELECT 2, d FROM <other bucket> WHERE d IN (…) LOCK IN SHARE MODE) …
//	INSERT INTO <current bucket> (d, fingerprint, idem_key) VALUES (…), …
//
// MySQL has no RETURNING and no ON CONFLICT DO NOTHING, so the keys that
// are new are the ones the first statement did not find. The insert is a
// plain INSERT: when a concurrent transaction recorded one of them in the
// current bucket meanwhile, it fails whole with 1062 (rolling back only
// itself) and the keys are inserted one at a time, each 1062 a duplicate.
//
// Exactness across buckets. The current bucket's primary key catches a
// concurrent duplicate in the same bucket (InnoDB's duplicate check waits
// for the other inserter to commit or roll back). A duplicate inserted into
// ANOTHER bucket by a concurrent transaction (two deliveries straddling a
// boundary) is caught by the locking reads: at REPEATABLE READ (or
// SERIALIZABLE) a locking read of an absent key takes a gap lock, which
// blocks a concurrent insert of that key into that bucket until this
// transaction ends, and a locking read of a present, uncommitted key waits
// for its inserter. So of two such transactions either one waits for the
// other and then sees its key, or both hold a gap lock where the other
// inserts, and InnoDB rolls one back (1213, retried; the retry sees the
// committed key). At READ COMMITTED InnoDB takes no gap locks, and both
// would commit: every transaction therefore reads the session's isolation
// level in the same statement and refuses READ COMMITTED and READ
// UNCOMMITTED (ErrUnsafeTable).
//
// The current bucket is read without locks: a gap lock there would block
// every concurrent batch whose keys fall in the same gap (with time-ordered
// keys, all of them). Other buckets take inserts only around a boundary, so
// their gap locks cost nothing in between.
//
// Statement text depends only on the bucket list, the batch size and the
// current bucket: a key that a bucket's lookup filter rules out is bound as
// NULL in that bucket's IN list (which matches nothing), so both statements
// are prepared once per list version and reused.

// mysqlFrozenErrno is the error number the frozen rows table's trigger
// raises (outside the server's own ranges).
const mysqlFrozenErrno = 31401

// mysqlNowUS is MySQL's clock in Unix microseconds, independent of the
// session's time zone.
const mysqlNowUS = `TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))`

// mysqlLockWait bounds, in seconds, how long dropping a bucket and reading
// a lookup filter wait for transactions holding the bucket: while a DROP
// waits for its metadata lock, new statements naming the table queue
// behind it.
const mysqlLockWait = 2

func mysqlBucketSchema(m string, salt []byte, width string) []string {
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + m + ` (name VARBINARY(64) NOT NULL PRIMARY KEY, value VARBINARY(255) NOT NULL) ENGINE=InnoDB`,
		// One statement: the salt and the width appear together.
		`INSERT INTO ` + m + ` (name, value) VALUES ('salt', X'` + hex.EncodeToString(salt) + `'), ('bucket_seconds', '` + width + `') ON DUPLICATE KEY UPDATE name = name`,
	}
}

func mysqlBucketTableSQL(n string) string {
	// BINARY(16): a fixed 16 bytes, compared byte for byte.
	return `CREATE TABLE IF NOT EXISTS ` + n + ` (d BINARY(16) NOT NULL PRIMARY KEY, fingerprint VARBINARY(64) NULL, idem_key VARBINARY(255) NULL) ENGINE=InnoDB`
}

// mysqlSchemaArg is the schema part of t as a bind argument: nil for the
// connection's database.
func mysqlSchemaArg(t string) (any, string) {
	schema, name := splitTable(t)
	if schema == "" {
		return nil, name
	}
	return schema, name
}

func mysqlTableExists(ctx context.Context, q querier, t string) (bool, error) {
	schema, name := mysqlSchemaArg(t)
	var n int
	err := q.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?`, schema, name).Scan(&n)
	return n > 0, err
}

// mysqlIsolationVar names the session variable holding the isolation
// level: MariaDB before 11.1 has only tx_isolation, MySQL 8 only
// transaction_isolation.
func mysqlIsolationVar(ctx context.Context, q querier) (string, error) {
	var v string
	if err := q.QueryRowContext(ctx, `SELECT VERSION()`).Scan(&v); err != nil {
		return "", err
	}
	if strings.Contains(strings.ToLower(v), "mariadb") {
		return "tx_isolation", nil
	}
	return "transaction_isolation", nil
}

// mysqlListSQL lists the tables whose name is LIKE ? in the schema ?
// (nil: the connection's), with whether each one is a trustworthy bucket:
// InnoDB, exactly one unique index, its primary key on (d) alone,
// BINARY(16), no column prefix, and no trigger. Each information_schema
// table is read once, filtered by constants (correlated subqueries would
// open every bucket once per bucket).
const mysqlListSQL = `SELECT t.TABLE_NAME,
	t.ENGINE = 'InnoDB' AND COALESCE(s.uniq, 0) = 1 AND COALESCE(s.pk, 0) = 1 AND COALESCE(s.pkd, 0) = 1
	AND COALESCE(c.typ, '') = 'binary(16)' AND tr.n IS NULL
FROM (SELECT TABLE_NAME, ENGINE FROM information_schema.TABLES
      WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_TYPE = 'BASE TABLE' AND TABLE_NAME LIKE ?) t
LEFT JOIN (SELECT TABLE_NAME, COUNT(DISTINCT INDEX_NAME) AS uniq, SUM(INDEX_NAME = 'PRIMARY') AS pk,
             SUM(INDEX_NAME = 'PRIMARY' AND COLUMN_NAME = 'd' AND SUB_PART IS NULL) AS pkd
           FROM information_schema.STATISTICS
           WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME LIKE ? AND NON_UNIQUE = 0 GROUP BY TABLE_NAME) s
  ON s.TABLE_NAME = t.TABLE_NAME
LEFT JOIN (SELECT TABLE_NAME, LOWER(COLUMN_TYPE) AS typ FROM information_schema.COLUMNS
           WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME LIKE ? AND COLUMN_NAME = 'd') c
  ON c.TABLE_NAME = t.TABLE_NAME
LEFT JOIN (SELECT EVENT_OBJECT_TABLE, COUNT(*) AS n FROM information_schema.TRIGGERS
           WHERE EVENT_OBJECT_SCHEMA = COALESCE(?, DATABASE()) AND EVENT_OBJECT_TABLE LIKE ? GROUP BY EVENT_OBJECT_TABLE) tr
  ON tr.EVENT_OBJECT_TABLE = t.TABLE_NAME`

func (b *buckets) mysqlList(ctx context.Context, q querier, prefix string) (*sql.Rows, error) {
	schema, _ := mysqlSchemaArg(b.table)
	like := strings.ReplaceAll(prefix, "_", `\_`) + "%" // list checks each name exactly
	return q.QueryContext(ctx, mysqlListSQL, schema, like, schema, like, schema, like, schema, like)
}

// memo returns the statement cached under ck for version, building it
// once.
func (b *buckets) memo(ck string, version int, build func() string) string {
	if s, ok := b.cachedSQL(ck, version); ok {
		return s
	}
	return b.storeSQL(ck, version, build())
}

// cachedSQL returns the statement cached under ck, if it was built for
// version.
func (b *buckets) cachedSQL(ck string, version int) (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.version != version {
		return "", false
	}
	s, ok := b.sql[ck]
	return s, ok
}

// storeSQL caches s under ck if the list is still at version, and returns
// it.
func (b *buckets) storeSQL(ck string, version int, s string) string {
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

// inList is "(?,?,…)" with n placeholders.
func inList(n int) string {
	return "(" + strings.TrimSuffix(strings.Repeat("?,", n), ",") + ")"
}

// mysqlProbeSQL is the first statement of a batch of n keys (see above):
// the isolation level (w = 0), the keys found in the current bucket
// (w = 1), in the other buckets (w = 2) and, after a migration, in the
// frozen rows table (w = 3, by key text).
func (b *buckets) mysqlProbeSQL(cur int64, others []int64, legacy bool, n, version int) string {
	ck := "mp" + strconv.Itoa(n) + "/" + strconv.FormatInt(cur, 10) + "/" + strconv.FormatBool(legacy)
	return b.memo(ck, version, func() string {
		in := inList(n)
		var q strings.Builder
		q.WriteString("SELECT 0 AS w, CAST(@@SESSION." + b.isoVar + " AS BINARY) AS v")
		q.WriteString(" UNION ALL SELECT 1, d FROM " + bucketName(b.table, cur) + " WHERE d IN " + in)
		for _, s := range others {
			q.WriteString(" UNION ALL (SELECT 2, d FROM " + bucketName(b.table, s) + " WHERE d IN " + in + " LOCK IN SHARE MODE)")
		}
		if legacy {
			// Frozen: every row committed before the buckets were
			// used, so a plain read sees them all.
			q.WriteString(" UNION ALL SELECT 3, idem_key FROM " + b.table + " WHERE consumer = ? AND idem_key IN " + in)
		}
		return q.String()
	})
}

func (b *buckets) mysqlInsertSQL(cur int64, n, version int) string {
	ck := "mi" + strconv.Itoa(n) + "/" + strconv.FormatInt(cur, 10)
	return b.memo(ck, version, func() string {
		return "INSERT INTO " + bucketName(b.table, cur) + " (d, fingerprint, idem_key) VALUES " +
			strings.TrimSuffix(strings.Repeat("(?,?,?),", n), ",")
	})
}

// mysqlBucketInsert is bucketInsert on MySQL.
func (in *Inbox) mysqlBucketInsert(ctx context.Context, tx *sql.Tx, b *buckets, msgs []Message, idx []int) (map[string]bool, error) {
	starts, version := b.snapshot()
	cur, ok := target(starts, b.current())
	if !ok {
		return nil, errBucketsChanged
	}
	filters := b.filtersFor(starts)
	var others []int64
	var ofs []*bloom
	for i, s := range starts {
		if s != cur {
			others, ofs = append(others, s), append(ofs, filters[i])
		}
	}
	legacy := b.legacy.Load()
	inserted := make(map[string]bool, len(idx))
	for lo := 0; lo < len(idx); lo += maxRowsPerInsert {
		chunk := idx[lo:min(lo+maxRowsPerInsert, len(idx))]
		n := len(chunk)
		ds := make([][16]byte, n)
		args := make([]any, 0, n*(len(others)+2)+1)
		for j, i := range chunk {
			ds[j] = b.digest(in.consumer, msgs[i].Key)
			args = append(args, ds[j][:])
		}
		for k := range others {
			for j := range ds {
				if ofs[k] != nil && !ofs[k].mayContain(ds[j]) {
					args = append(args, nil) // ruled out by the filter
				} else {
					args = append(args, ds[j][:])
				}
			}
		}
		if legacy {
			args = append(args, in.consumer)
			for _, i := range chunk {
				args = append(args, msgs[i].Key)
			}
		}
		found, foundKeys, err := in.mysqlProbe(ctx, tx, b, b.mysqlProbeSQL(cur, others, legacy, n, version), version, args)
		if err != nil {
			return nil, err
		}
		var fresh []int // positions in chunk
		for j, i := range chunk {
			if !found[ds[j]] && !foundKeys[msgs[i].Key] {
				fresh = append(fresh, j)
			}
		}
		if len(fresh) == 0 {
			continue
		}
		// In digest order: time-ordered keys then append at the B-tree's
		// right edge, and InnoDB, seeing ascending inserts, splits pages
		// at the insert point and leaves them full (in batch order, keys
		// of one millisecond land in random order and each split leaves
		// a half-empty page behind).
		slices.SortFunc(fresh, func(x, y int) int { return bytes.Compare(ds[x][:], ds[y][:]) })
		row := func(j int) []any {
			m := msgs[chunk[j]]
			var k any
			if in.cfg.keyText {
				k = m.Key
			}
			return []any{ds[j][:], nullBytes(m.Fingerprint), k}
		}
		args = args[:0]
		for _, j := range fresh {
			args = append(args, row(j)...)
		}
		err = in.mysqlExec(ctx, tx, b, b.mysqlInsertSQL(cur, len(fresh), version), version, args)
		if err == nil {
			for _, j := range fresh {
				inserted[msgs[chunk[j]].Key] = true
			}
			continue
		}
		if !in.dialect.IsUniqueViolation(err) {
			return nil, in.bucketStatementError(ctx, err)
		}
		// A concurrent transaction recorded one of them in the current
		// bucket since the probe read it: find which, one at a time.
		for _, j := range fresh {
			err := in.mysqlExec(ctx, tx, b, b.mysqlInsertSQL(cur, 1, version), version, row(j))
			switch {
			case err == nil:
				inserted[msgs[chunk[j]].Key] = true
			case in.dialect.IsUniqueViolation(err):
				// recorded: a duplicate
			default:
				return nil, in.bucketStatementError(ctx, err)
			}
		}
	}
	return inserted, nil
}

// mysqlProbe runs the probe statement and returns the digests and keys it
// found; it refuses an isolation level without gap locks.
func (in *Inbox) mysqlProbe(ctx context.Context, tx *sql.Tx, b *buckets, q string, version int, args []any) (map[[16]byte]bool, map[string]bool, error) {
	rows, err := b.txQuery(ctx, tx, q, version, args)
	if err != nil {
		return nil, nil, in.bucketStatementError(ctx, err)
	}
	defer rows.Close()
	var iso string
	found := map[[16]byte]bool{}
	var keys map[string]bool
	for rows.Next() {
		var w int
		var v []byte
		if err := rows.Scan(&w, &v); err != nil {
			return nil, nil, in.bucketStatementError(ctx, err)
		}
		switch {
		case w == 0:
			iso = string(v)
		case w == 3:
			if keys == nil {
				keys = map[string]bool{}
			}
			keys[string(v)] = true
		case len(v) == 16:
			found[[16]byte(v)] = true
		default:
			return nil, nil, fmt.Errorf("inbox: record keys: digest of %d bytes", len(v))
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, in.bucketStatementError(ctx, err)
	}
	if iso != "REPEATABLE-READ" && iso != "SERIALIZABLE" {
		// Without gap locks two deliveries of one key straddling a
		// bucket boundary would both be applied (see above).
		return nil, nil, fmt.Errorf("inbox: the bucketed layout needs REPEATABLE READ (the default) or SERIALIZABLE transactions on MySQL (this session's level is %s): use the rows layout, or the default isolation: %w", iso, ErrUnsafeTable)
	}
	return found, keys, nil
}

// txQuery runs q in tx, prepared when cached for version (txStmt).
func (b *buckets) txQuery(ctx context.Context, tx *sql.Tx, q string, version int, args []any) (*sql.Rows, error) {
	if st := b.txStmt(ctx, tx, q, version); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return tx.QueryContext(ctx, q, args...)
}

func (in *Inbox) mysqlExec(ctx context.Context, tx *sql.Tx, b *buckets, q string, version int, args []any) error {
	var err error
	if st := b.txStmt(ctx, tx, q, version); st != nil {
		_, err = st.ExecContext(ctx, args...)
	} else {
		_, err = tx.ExecContext(ctx, q, args...)
	}
	return err
}

// mysqlBucketFingerprint is bucketFingerprint on MySQL. Its reads lock: the
// key may have been committed after this transaction's snapshot (the probe
// waited for it), and only a locking read sees the latest version.
func (in *Inbox) mysqlBucketFingerprint(ctx context.Context, tx *sql.Tx, b *buckets, m Message) ([]byte, error) {
	starts, _ := b.snapshot()
	d := b.digest(in.consumer, m.Key)
	var parts []string
	var args []any
	for _, s := range starts {
		parts = append(parts, "(SELECT fingerprint FROM "+bucketName(b.table, s)+" WHERE d = ? AND fingerprint IS NOT NULL LOCK IN SHARE MODE)")
		args = append(args, d[:])
	}
	if b.legacy.Load() {
		parts = append(parts, "(SELECT fingerprint FROM "+b.table+" WHERE consumer = ? AND idem_key = ? AND fingerprint IS NOT NULL)")
		args = append(args, in.consumer, m.Key)
	}
	if len(parts) == 0 {
		return nil, nil
	}
	var f []byte
	err := tx.QueryRowContext(ctx, strings.Join(parts, " UNION ALL ")+" LIMIT 1", args...).Scan(&f)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, in.bucketStatementError(ctx, err)
	}
	return f, nil
}

// mysqlSealBarrier waits, inside tx, for the transactions that inserted
// into bucket name and may still be open: a locking read of every row
// waits for each uncommitted one (and its gap locks keep the bucket as it
// is until tx ends).
func mysqlSealBarrier(ctx context.Context, tx *sql.Tx, name string) error {
	return withLockWait(ctx, tx, "innodb_lock_wait_timeout", func() error {
		var n int
		return tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+name+` LOCK IN SHARE MODE`).Scan(&n)
	})
}

// withLockWait runs f with the session variable v (a lock wait timeout)
// set to mysqlLockWait seconds, and restores it.
func withLockWait(ctx context.Context, tx *sql.Tx, v string, f func() error) error {
	var old int64
	if err := tx.QueryRowContext(ctx, `SELECT @@SESSION.`+v).Scan(&old); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `SET SESSION `+v+` = `+strconv.Itoa(mysqlLockWait)); err != nil {
		return err
	}
	err := f()
	if _, rerr := tx.ExecContext(context.WithoutCancel(ctx), `SET SESSION `+v+` = `+strconv.FormatInt(old, 10)); rerr != nil && err == nil {
		err = rerr
	}
	return err
}

// mysqlFrozenTrigger is the trigger's qualified name (a trigger lives in
// its table's schema).
func mysqlFrozenTrigger(t string) string {
	schema, _ := splitTable(t)
	if schema == "" {
		return frozenName(t)
	}
	return schema + "." + frozenName(t)
}

func mysqlTriggerExists(ctx context.Context, q querier, t string) (bool, error) {
	schema, name := mysqlSchemaArg(t)
	var n int
	err := q.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE EVENT_OBJECT_SCHEMA = COALESCE(?, DATABASE()) AND EVENT_OBJECT_TABLE = ? AND TRIGGER_NAME = ?`, schema, name, frozenName(t)).Scan(&n)
	return n > 0, err
}

// mysqlFreeze is MigrateLayout's first step on MySQL, where every DDL
// statement commits by itself, so the order does the work of PostgreSQL's
// one transaction: first the trigger that refuses inserts into the rows
// table (CREATE TRIGGER takes the table's exclusive metadata lock, so it
// waits for every transaction that inserted there), then the meta table,
// filled under another name and renamed into place in one atomic step. An
// Inbox that sees the meta table therefore finds the rows table frozen and
// every key in it committed. A crash between the steps leaves the rows
// table frozen without a meta table: Inbox values retry, and MigrateLayout
// run again completes it.
func (in *Inbox) mysqlFreeze(ctx context.Context, tx *sql.Tx) error {
	t := in.cfg.table
	ok, err := mysqlTriggerExists(ctx, tx, t)
	if err != nil {
		return fmt.Errorf("inbox: migrate layout: %w", err)
	}
	if !ok {
		q := `CREATE TRIGGER ` + mysqlFrozenTrigger(t) + ` BEFORE INSERT ON ` + t + ` FOR EACH ROW SIGNAL SQLSTATE '45000' SET MYSQL_ERRNO = ` +
			strconv.Itoa(mysqlFrozenErrno) + `, MESSAGE_TEXT = 'inbox: table ` + t + ` was migrated to the bucketed layout: upgrade idem'`
		if _, err := tx.ExecContext(ctx, q); err != nil && sqldialect.MySQLErrorNumber(err) != 1359 { // 1359: it exists
			return fmt.Errorf("inbox: migrate layout: %w", err)
		}
	}
	m := metaTableName(t)
	tmp := m + "_new"
	salt := make([]byte, 16)
	_, _ = rand.Read(salt)
	stmts := append([]string{`DROP TABLE IF EXISTS ` + tmp}, mysqlBucketSchema(tmp, salt, strconv.FormatInt(int64(in.cfg.width/time.Second), 10))...)
	stmts = append(stmts,
		`INSERT INTO `+tmp+` (name, value) VALUES ('migrated_us', CAST(`+mysqlNowUS+` AS CHAR))`,
		`RENAME TABLE `+tmp+` TO `+m)
	return execCommit(ctx, tx, "migrate layout", stmts)
}

// mysqlRetireBuckets is retireBuckets on MySQL, where DROP TABLE commits
// by itself: the horizon, the clock and the bucket list are read in one
// short transaction, and each table is then dropped by a statement of its
// own, never inside a transaction that records keys. Time only moves on
// between the two, so a bucket old enough when read is old enough when
// dropped.
func (in *Inbox) mysqlRetireBuckets(ctx context.Context, b *buckets, olderThan time.Duration) (int, error) {
	var drop []string
	err := in.withRetry(ctx, func() error {
		drop = drop[:0]
		return in.readTx(ctx, func(tx *sql.Tx) error {
			expired, limit, err := in.expiredBuckets(ctx, tx, b, olderThan)
			if err != nil {
				return err
			}
			for _, s := range expired {
				drop = append(drop, bucketName(in.cfg.table, s))
			}
			old, err := in.legacyExpired(ctx, tx, b, limit)
			if old {
				drop = append(drop, in.cfg.table)
			}
			return err
		})
	})
	if err != nil || len(drop) == 0 {
		return 0, err
	}
	// Dropped oldest first, so a failure leaves only younger tables.
	dropped := 0
	err = in.readTx(ctx, func(tx *sql.Tx) error {
		return withLockWait(ctx, tx, "lock_wait_timeout", func() error {
			for _, name := range drop {
				if _, err := tx.ExecContext(ctx, `DROP TABLE IF EXISTS `+name); err != nil {
					return fmt.Errorf("inbox: sweep: drop %s (a transaction held it for %d s; the next sweep tries again): %w", name, mysqlLockWait, err)
				}
				dropped++
			}
			return nil
		})
	})
	if dropped > 0 {
		in.isReady.Store(false) // other Inbox values find out from their next statement's error
	}
	return dropped, err
}

// mysqlMidMigration returns errLayoutChanged (retried) when the rows table
// is frozen but the meta table is not there yet: MigrateLayout is between
// its two steps (see mysqlFreeze), for milliseconds unless it died there.
func (in *Inbox) mysqlMidMigration(ctx context.Context, tx *sql.Tx) error {
	ok, err := mysqlTriggerExists(ctx, tx, in.cfg.table)
	if err != nil || !ok {
		return err
	}
	return fmt.Errorf("inbox: table %s is frozen but has no meta table (%s) yet: MigrateLayout is under way, or died midway (run it again): %w", in.cfg.table, metaTableName(in.cfg.table), errLayoutChanged)
}
