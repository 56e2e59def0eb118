package bucket

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idem-go/idem/inbox/internal/engine"
	"github.com/idem-go/idem/inbox/internal/engine/bloom"
	"github.com/idem-go/idem/internal/digest"
	"github.com/idem-go/idem/sqldialect"
)

// The meta rows of a SQLite table whose buckets hold runs (package runs):
// RunsMeta holds the version of the run list, and RunWidthMeta the bucket
// width, under a name the first bucketed release does not read, so that
// release refuses the table (it would not look keys up in runs).
const (
	RunsMeta     = "runs"
	RunWidthMeta = "run_bucket_seconds"
)

// MetaName is the meta table of t, which holds its salt and bucket width.
func MetaName(t string) string { return t + "_meta" }

// Name is the bucket table of t starting at s (Unix seconds).
func Name(t string, s int64) string { return t + "_k" + strconv.FormatInt(s, 10) }

// Schema is the schema of a new table in the bucketed layout: the
// meta table with the table's salt and bucket width. Bucket tables are
// made by the Inbox as time reaches them.
func Schema(d sqldialect.Dialect, t string, width time.Duration) []string {
	m := MetaName(t)
	salt := digest.NewSalt()
	w := strconv.FormatInt(int64(width/time.Second), 10)
	switch d {
	case sqldialect.Postgres:
		return []string{
			digest.MetaTable(d, m),
			`INSERT INTO ` + m + ` (name, value) VALUES ('salt', ` + digest.Literal(d, salt) + `), ('bucket_seconds', convert_to('` + w + `', 'UTF8')) ON CONFLICT (name) DO NOTHING`,
		}
	case sqldialect.SQLite:
		// Buckets of runs (package runs): the width under RunWidthMeta.
		return []string{
			digest.MetaTable(d, m),
			`INSERT INTO ` + m + ` (name, value) VALUES ('salt', ` + digest.Literal(d, salt) + `), ('` + RunWidthMeta + `', CAST('` + w + `' AS BLOB)), ('` + RunsMeta + `', CAST('0' AS BLOB)) ON CONFLICT (name) DO NOTHING`,
		}
	case sqldialect.MySQL:
		return MySQLSchema(m, salt, w)
	}
	return nil
}

// MySQLSchema is Schema on MySQL, with width in seconds.
func MySQLSchema(m string, salt []byte, width string) []string {
	return []string{
		digest.MetaTable(sqldialect.MySQL, m),
		// One statement: the salt and the width appear together.
		`INSERT INTO ` + m + ` (name, value) VALUES ('salt', ` + digest.Literal(sqldialect.MySQL, salt) + `), ('bucket_seconds', '` + width + `') ON DUPLICATE KEY UPDATE name = name`,
	}
}

// TableSQL creates the bucket table starting at s.
func TableSQL(d sqldialect.Dialect, t string, s int64) string {
	n := Name(t, s)
	switch d {
	case sqldialect.Postgres:
		// uuid, not bytea: 16 bytes with no length header, so the heap
		// tuple and the index entry are those of a bare uuid table (a
		// NULL fingerprint and key cost nothing: the null bitmap fits in
		// the header's padding).
		return `CREATE TABLE IF NOT EXISTS ` + n + ` (d uuid PRIMARY KEY, fingerprint bytea, idem_key text)`
	case sqldialect.MySQL:
		return mysqlTableSQL(n)
	default:
		return `CREATE TABLE IF NOT EXISTS ` + n + ` (d BLOB PRIMARY KEY, fingerprint BLOB, idem_key TEXT) WITHOUT ROWID`
	}
}

func mysqlTableSQL(n string) string {
	// BINARY(16): a fixed 16 bytes, compared byte for byte.
	return `CREATE TABLE IF NOT EXISTS ` + n + ` (d BINARY(16) NOT NULL PRIMARY KEY, fingerprint VARBINARY(64) NULL, idem_key VARBINARY(255) NULL) ENGINE=InnoDB`
}

// Load reads the meta table of t; nil if there is none.
func Load(ctx context.Context, q engine.Querier, h *engine.Host) (*State, error) {
	d, t := h.D, h.Table
	m := MetaName(t)
	ok, err := engine.TableExists(ctx, q, d, m)
	if err != nil || !ok {
		return nil, err
	}
	b := &State{D: d, Table: t, Meta: m, h: h, filters: map[int64]*bloom.Filter{}, filterFailed: map[int64]time.Time{}}
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
			b.Salt = v
		case "bucket_seconds", RunWidthMeta:
			b.Width, _ = strconv.ParseInt(string(v), 10, 64)
		case RunsMeta:
			if d == sqldialect.SQLite {
				b.HasRuns = true
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(b.Salt) < 16 || b.Width <= 0 {
		return nil, fmt.Errorf("inbox: table %s has no salt or bucket width: apply SchemaSQL again: %w", m, engine.ErrUnsafeTable)
	}
	legacy, err := engine.TableExists(ctx, q, d, t)
	if err != nil {
		return nil, err
	}
	b.Legacy.Store(legacy)
	if d == sqldialect.MySQL {
		if b.IsoVar, err = mysqlIsolationVar(ctx, q); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// List reads the bucket tables from the catalog and checks each one's
// primary key: exactly (d), and no other unique index.
//
// PostgreSQL's and SQLite's catalogs are read in one snapshot. MySQL's
// information_schema is not: a bucket that another process is creating
// (Ensure, at a bucket boundary) or dropping (Sweep: its DROP TABLE
// waiting for the transactions that read it, or half done) is listed
// among the tables without its index, as if it had none. So on MySQL a
// table that fails the check is opened first: that waits, as any
// statement on it does, until a CREATE or DROP under way ends. A table
// gone by then is not listed; one that opened and still fails is
// unsafe. Other buckets may come and go meanwhile, each opened in turn,
// for a few rounds at most; then List fails with engine.ErrCatalogChanging
// (not engine.ErrBucketsChanged, which callers read as "the list was read
// and has changed"), which the inbox reruns like a rolled-back
// transaction.
func (b *State) List(ctx context.Context, q engine.Querier) ([]int64, error) {
	opened := map[string]bool{}
	for attempt := 1; ; attempt++ {
		starts, bad, err := b.list(ctx, q)
		if err != nil {
			return nil, err
		}
		if bad == "" {
			return starts, nil
		}
		if b.D != sqldialect.MySQL || opened[bad] {
			return nil, fmt.Errorf("inbox: bucket table %s must have a unique index on (d) and no other unique index (uuid on PostgreSQL, BLOB with BINARY collation on SQLite, BINARY(16) in InnoDB on MySQL), and no triggers: keys in it could be recorded twice or skipped: %w", bad, engine.ErrUnsafeTable)
		}
		if attempt == 8 {
			return nil, fmt.Errorf("inbox: list bucket tables: %s and others were still being created or dropped after %d reads of the catalog: %w", bad, attempt, engine.ErrCatalogChanging)
		}
		name := bad
		if schema, _ := engine.SplitTable(b.Table); schema != "" {
			name = schema + "." + bad
		}
		rows, err := q.QueryContext(ctx, `SELECT 1 FROM `+name+` LIMIT 0`)
		if err == nil {
			err = rows.Close()
		}
		switch {
		case err == nil:
			opened[bad] = true // read it again: unsafe if it still fails
		case sqldialect.MySQLErrorNumber(err) == 1146:
			// dropped meanwhile
		default:
			return nil, fmt.Errorf("inbox: list bucket tables: open %s: %w", name, err)
		}
	}
}

// list reads the catalog once: the sorted bucket starts, and the name of
// a table that fails the check ("" if none does).
func (b *State) list(ctx context.Context, q engine.Querier) (starts []int64, bad string, err error) {
	schema, name := engine.SplitTable(b.Table)
	prefix := name + "_k"
	var rows *sql.Rows
	switch b.D {
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
		return nil, "", err
	}
	defer rows.Close()
	for rows.Next() {
		var n string
		var good bool
		if err := rows.Scan(&n, &good); err != nil {
			return nil, "", err
		}
		s, perr := strconv.ParseInt(strings.TrimPrefix(n, prefix), 10, 64)
		if perr != nil || n != prefix+strconv.FormatInt(s, 10) {
			continue // another table whose name starts alike
		}
		if !good && bad == "" {
			bad = n
		}
		starts = append(starts, s)
	}
	if err := rows.Err(); err != nil {
		return nil, "", err
	}
	slices.Sort(starts)
	return starts, bad, nil
}

// mysqlIsolationVar names the session variable holding the isolation
// level: MariaDB before 11.1 has only tx_isolation, MySQL 8 only
// transaction_isolation.
func mysqlIsolationVar(ctx context.Context, q engine.Querier) (string, error) {
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

func (b *State) mysqlList(ctx context.Context, q engine.Querier, prefix string) (*sql.Rows, error) {
	schema, _ := engine.MySQLSchemaArg(b.Table)
	like := strings.ReplaceAll(prefix, "_", `\_`) + "%" // list checks each name exactly
	return q.QueryContext(ctx, mysqlListSQL, schema, like, schema, like, schema, like, schema, like)
}
