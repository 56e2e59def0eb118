package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/sqldialect"
)

// ErrUnsafeTable is wrapped when the key table exists but cannot be
// trusted to reject a second (consumer, idem_key): with such a table every
// redelivery would be applied again, or a fresh message dropped as a
// duplicate, so the Inbox refuses to work on it.
var ErrUnsafeTable = errors.New("inbox: key table cannot dedupe")

// ErrNotMigrated is wrapped when the key table does not exist (in either
// layout): [Inbox.Migrate] was not called and [Inbox.SchemaSQL] was not
// applied, or the Inbox is pointed at another database or table than the
// one migrated. Nothing was recorded or applied; it is a deployment error,
// which no retry cures.
var ErrNotMigrated = errors.New("inbox: not migrated")

// uniqueIndex is one unique index or primary key of the key table, as the
// catalog describes it.
type uniqueIndex struct {
	name string
	cols []string // key columns in order; "" for an expression
	flaw string   // why it does not enforce byte-exact uniqueness of its columns, or ""
	// looser: it can equate two distinct keys (a collation, a prefix), so
	// it may reject a fresh message even when it contains both columns.
	looser bool
}

func (u uniqueIndex) String() string {
	s := fmt.Sprintf("%s (%s)", u.name, strings.Join(u.cols, ", "))
	if u.flaw != "" {
		s += " " + u.flaw
	}
	return s
}

// Verify checks, with the database's catalog, that the key table enforces
// exactly the uniqueness the inbox relies on, and returns an error wrapping
// [ErrUnsafeTable] that names the table and the problem otherwise (an error
// wrapping [ErrNotMigrated] when the table does not exist at all):
//
//   - a unique index or primary key on exactly (consumer, idem_key), in any
//     order: not partial, not on expressions or column prefixes, not
//     deferrable, valid;
//   - no other unique index that could fire first: every other one must
//     contain both consumer and idem_key (a superset is implied by the exact
//     one and never fires). A unique index on (idem_key) alone is refused:
//     it makes the same key under two consumers collide, and the second
//     consumer's message would be dropped as a duplicate;
//   - consumer and idem_key compare byte for byte and hold 255 bytes:
//     PostgreSQL text or varchar(≥255) with a deterministic collation (not
//     char(n), which ignores trailing spaces, nor citext); SQLite TEXT or
//     BLOB affinity with the BINARY collation; MySQL VARBINARY(≥255). The
//     fingerprint column holds 64 bytes (PostgreSQL bytea, MySQL
//     VARBINARY(64) or a BLOB);
//   - no BEFORE INSERT trigger or rule that could rewrite or skip the key's
//     insert, and (MySQL) a transactional engine (InnoDB), (PostgreSQL) a
//     logged, permanent table: a MyISAM table commits the key without the
//     effect, an unlogged one forgets every key in a crash.
//
// A table in the bucketed layout ([LayoutBuckets]: a <table>_meta table
// exists) is checked instead for what that layout relies on: every bucket
// table <table>_k<start> has exactly one unique index, its primary key on
// (d) (uuid on PostgreSQL, BLOB with the BINARY collation on SQLite,
// BINARY(16) in InnoDB on MySQL), no
// trigger, and is a logged table; a rows table beside it must carry the
// trigger [Inbox.MigrateLayout] installs.
//
// Every Inbox runs Verify once, before its first Process, ProcessBatch,
// ProcessBatchSet or Sweep (and Migrate runs it after creating the table),
// so a table made by a migration tool is checked too; after one success it
// is not repeated. Calling Verify yourself, at start-up, surfaces a bad
// table before the first message. Verify only reads the catalog.
func (in *Inbox) Verify(ctx context.Context) error {
	_, err := in.verify(ctx)
	return err
}

// verify is Verify, returning the bucketed layout's state when the table
// has that layout (nil for the rows layout).
func (in *Inbox) verify(ctx context.Context) (*buckets, error) {
	var b *buckets
	err := in.readTx(ctx, func(tx *sql.Tx) error {
		var err error
		if b, err = loadBuckets(ctx, tx, in.dialect, in.cfg.table); err != nil {
			return err
		}
		if b == nil {
			if in.dialect == sqldialect.MySQL {
				return in.mysqlMidMigration(ctx, tx)
			}
			return nil
		}
		if in.dialect == sqldialect.MySQL {
			if galera, err := mysqlGalera(ctx, tx); err != nil {
				return err
			} else if galera {
				return fmt.Errorf("%w: table %s: %w", ErrUnsafeTable, in.cfg.table, errGaleraBuckets)
			}
		}
		return in.verifyBuckets(ctx, tx, b)
	})
	if err != nil {
		if errors.Is(err, ErrUnsafeTable) {
			return nil, err
		}
		if m := in.mismatch(ctx, err); m != nil {
			return nil, m
		}
		return nil, fmt.Errorf("inbox: verify table %s: %w", in.cfg.table, err)
	}
	if b != nil {
		return b, nil
	}
	return nil, in.verifyRows(ctx)
}

// mismatch returns an error wrapping a [sqldialect.MismatchError] (and
// err) when the database is not of the Inbox's dialect, and nil otherwise:
// the server's own error (a syntax error, an unknown table sqlite_master)
// does not say what to change. It runs on error paths only.
func (in *Inbox) mismatch(ctx context.Context, err error) error {
	if err == nil || errors.Is(err, ErrUnsafeTable) || errors.Is(err, ErrNotMigrated) {
		return nil
	}
	var m error
	_ = in.readTx(ctx, func(tx *sql.Tx) error {
		m = in.dialect.Mismatch(ctx, tx, "the inbox", err)
		return nil
	})
	if m != nil {
		return fmt.Errorf("inbox: %w", m)
	}
	return nil
}

func (in *Inbox) verifyRows(ctx context.Context) error {
	tx, err := in.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("inbox: verify table %s: begin: %w", in.cfg.table, err)
	}
	defer tx.Rollback()
	var v verifier
	switch in.dialect {
	case sqldialect.Postgres:
		err = v.postgres(ctx, tx, in.cfg.table)
	case sqldialect.SQLite:
		err = v.sqlite(ctx, tx, in.cfg.table)
	case sqldialect.MySQL:
		err = v.mysql(ctx, tx, in.cfg.table)
	}
	if err != nil {
		if m := in.mismatch(ctx, err); m != nil {
			return m
		}
		return err
	}
	return v.judge(in.cfg.table)
}

// verifier collects what the catalog says about the key table.
type verifier struct {
	missing bool
	flaws   []string // problems found that are not about unique indexes
	indexes []uniqueIndex
}

func (v *verifier) flawf(format string, args ...any) {
	v.flaws = append(v.flaws, fmt.Sprintf(format, args...))
}

func (v *verifier) judge(table string) error {
	if v.missing {
		return fmt.Errorf("inbox: table %s does not exist: call Migrate or apply SchemaSQL(): %w", table, ErrNotMigrated)
	}
	if len(v.flaws) > 0 {
		return fmt.Errorf("inbox: table %s: %s: %w", table, strings.Join(v.flaws, "; "), ErrUnsafeTable)
	}
	exact := false
	var found []string
	for _, u := range v.indexes {
		found = append(found, u.String())
		both := slices.Contains(u.cols, "consumer") && slices.Contains(u.cols, "idem_key")
		if u.looser {
			return fmt.Errorf("inbox: table %s: unique index %v: two distinct keys can collide in it, and the second message would be dropped as a duplicate: %w", table, u, ErrUnsafeTable)
		}
		if !both {
			return fmt.Errorf("inbox: table %s: unique index %v does not contain both consumer and idem_key: it rejects some fresh messages, which the inbox would then drop as duplicates; drop it: %w", table, u, ErrUnsafeTable)
		}
		if len(u.cols) == 2 && u.flaw == "" {
			exact = true
		}
	}
	if !exact {
		if len(found) == 0 {
			found = []string{"none"}
		}
		return fmt.Errorf("inbox: table %s has no unique index or primary key on exactly (consumer, idem_key) (found: %s): every redelivery would be applied again; a wider key such as (consumer, idem_key, processed_at) does not dedupe: %w", table, strings.Join(found, "; "), ErrUnsafeTable)
	}
	return nil
}

// splitTable splits schema.table.
func splitTable(t string) (schema, name string) {
	if i := strings.LastIndexByte(t, '.'); i >= 0 {
		return t[:i], t[i+1:]
	}
	return "", t
}

func (v *verifier) postgres(ctx context.Context, tx *sql.Tx, table string) error {
	wrap := func(err error) error { return fmt.Errorf("inbox: verify table %s: %w", table, err) }
	var kind, persistence sql.NullString
	err := tx.QueryRowContext(ctx, `SELECT c.relkind::text, c.relpersistence::text FROM pg_class c WHERE c.oid = to_regclass($1::text)`, table).Scan(&kind, &persistence)
	if errors.Is(err, sql.ErrNoRows) {
		v.missing = true
		return nil
	}
	if err != nil {
		return wrap(err)
	}
	switch {
	case kind.String != "r" && kind.String != "p":
		v.flawf("it is not a table (relkind %q)", kind.String)
	case persistence.String == "u":
		v.flawf("it is UNLOGGED: a crash empties it and every key recorded so far would be applied again")
	case persistence.String == "t":
		v.flawf("it is a temporary table, seen by one session only")
	}
	rows, err := tx.QueryContext(ctx, `SELECT a.attname::text, t.typname::text, a.atttypmod, COALESCE(co.collisdeterministic, true)
FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid LEFT JOIN pg_collation co ON co.oid = a.attcollation
WHERE a.attrelid = to_regclass($1::text) AND a.attname IN ('consumer', 'idem_key', 'fingerprint') AND a.attnum > 0 AND NOT a.attisdropped`, table)
	if err != nil {
		return wrap(err)
	}
	seen := 0
	for rows.Next() {
		var name, typ string
		var mod int
		var det bool
		if err := rows.Scan(&name, &typ, &mod, &det); err != nil {
			rows.Close()
			return wrap(err)
		}
		if name == "fingerprint" {
			if typ != "bytea" {
				v.flawf("column fingerprint is %s; want bytea", typ)
			}
			continue
		}
		seen++
		switch {
		case typ != "text" && typ != "varchar":
			v.flawf("column %s is %s; want text or varchar(255) (char(n) ignores trailing spaces, citext ignores case)", name, typ)
		case typ == "varchar" && mod >= 0 && mod-4 < 255:
			v.flawf("column %s is varchar(%d); want at least 255 characters", name, mod-4)
		case !det:
			v.flawf("column %s has a nondeterministic collation: keys that differ only in case or accents would collide", name)
		}
	}
	if err := rows.Err(); err != nil {
		return wrap(err)
	}
	if seen != 2 {
		v.flawf("columns consumer and idem_key not found")
	}
	var hooks string
	err = tx.QueryRowContext(ctx, `SELECT concat_ws(', ',
	(SELECT string_agg('trigger ' || tgname, ', ') FROM pg_trigger WHERE tgrelid = to_regclass($1::text) AND NOT tgisinternal AND tgtype & 1 = 1 AND tgtype & 2 = 2 AND tgtype & 4 = 4),
	(SELECT string_agg('rule ' || rulename, ', ') FROM pg_rules WHERE schemaname || '.' || tablename = to_regclass($1::text)::text OR tablename = to_regclass($1::text)::text))`, table).Scan(&hooks)
	if err != nil {
		return wrap(err)
	}
	if hooks != "" {
		v.flawf("%s can rewrite or skip the key's insert (a skipped insert reads as a duplicate)", hooks)
	}
	rows, err = tx.QueryContext(ctx, `SELECT ic.relname::text,
	array_to_string(ARRAY(SELECT COALESCE(a.attname::text, '(expression)')
		FROM unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
		LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
		WHERE k.ord <= i.indnkeyatts ORDER BY k.ord), ','),
	i.indpred IS NOT NULL, i.indimmediate, i.indisvalid,
	COALESCE((SELECT bool_and(co.collisdeterministic) FROM unnest(i.indcollation::oid[]) AS x(c) JOIN pg_collation co ON co.oid = x.c), true)
FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
WHERE i.indrelid = to_regclass($1::text) AND i.indisunique ORDER BY ic.relname`, table)
	if err != nil {
		return wrap(err)
	}
	defer rows.Close()
	for rows.Next() {
		var u uniqueIndex
		var cols string
		var partial, immediate, valid, det bool
		if err := rows.Scan(&u.name, &cols, &partial, &immediate, &valid, &det); err != nil {
			return wrap(err)
		}
		u.cols = strings.Split(cols, ",")
		switch {
		case partial:
			u.flaw = "is partial"
		case !immediate:
			u.flaw = "is deferrable"
		case !valid:
			u.flaw = "is not valid"
		case !det:
			u.flaw, u.looser = "uses a nondeterministic collation", true
		}
		v.indexes = append(v.indexes, u)
	}
	return wrap0(rows.Err(), wrap)
}

func wrap0(err error, wrap func(error) error) error {
	if err != nil {
		return wrap(err)
	}
	return nil
}

func (v *verifier) sqlite(ctx context.Context, tx *sql.Tx, table string) error {
	wrap := func(err error) error { return fmt.Errorf("inbox: verify table %s: %w", table, err) }
	rows, err := tx.QueryContext(ctx, `SELECT name, type FROM pragma_table_info(?)`, table)
	if err != nil {
		return wrap(err)
	}
	ncols, seen := 0, 0
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			rows.Close()
			return wrap(err)
		}
		ncols++
		if name != "consumer" && name != "idem_key" {
			continue
		}
		seen++
		// SQLite's affinity rules: a column of INTEGER, REAL or NUMERIC
		// affinity turns the text "1.0" into the number 1, and "1" and
		// "1.0" collide.
		t := strings.ToUpper(typ)
		if !(strings.Contains(t, "CHAR") || strings.Contains(t, "CLOB") || strings.Contains(t, "TEXT") || strings.Contains(t, "BLOB") || t == "") || strings.Contains(t, "INT") {
			v.flawf("column %s is %q, whose affinity converts keys that look like numbers; want TEXT", name, typ)
		}
	}
	if err := rows.Err(); err != nil {
		return wrap(err)
	}
	if ncols == 0 {
		v.missing = true
		return nil
	}
	if seen != 2 {
		v.flawf("columns consumer and idem_key not found")
	}
	var triggers string
	err = tx.QueryRowContext(ctx, `SELECT COALESCE(group_concat(name, ', '), '') FROM sqlite_master WHERE type = 'trigger' AND tbl_name = ? COLLATE NOCASE AND upper(sql) LIKE '%BEFORE%INSERT%'`, table).Scan(&triggers)
	if err != nil {
		return wrap(err)
	}
	if triggers != "" {
		v.flawf("BEFORE INSERT trigger %s can skip the key's insert (a skipped insert reads as a duplicate)", triggers)
	}
	type idx struct {
		name    string
		partial bool
	}
	var list []idx
	rows, err = tx.QueryContext(ctx, `SELECT name, partial FROM pragma_index_list(?) WHERE "unique" = 1 ORDER BY name`, table)
	if err != nil {
		return wrap(err)
	}
	for rows.Next() {
		var x idx
		if err := rows.Scan(&x.name, &x.partial); err != nil {
			rows.Close()
			return wrap(err)
		}
		list = append(list, x)
	}
	if err := rows.Err(); err != nil {
		return wrap(err)
	}
	for _, x := range list {
		u := uniqueIndex{name: x.name}
		if x.partial {
			u.flaw = "is partial"
		}
		rows, err := tx.QueryContext(ctx, `SELECT COALESCE(name, '(expression)'), COALESCE(coll, '') FROM pragma_index_xinfo(?) WHERE key = 1 ORDER BY seqno`, x.name)
		if err != nil {
			return wrap(err)
		}
		for rows.Next() {
			var col, coll string
			if err := rows.Scan(&col, &coll); err != nil {
				rows.Close()
				return wrap(err)
			}
			u.cols = append(u.cols, col)
			if !strings.EqualFold(coll, "BINARY") && u.flaw == "" {
				u.flaw, u.looser = "compares "+col+" with collation "+coll, true
			}
		}
		if err := rows.Err(); err != nil {
			return wrap(err)
		}
		v.indexes = append(v.indexes, u)
	}
	return nil
}

func (v *verifier) mysql(ctx context.Context, tx *sql.Tx, table string) error {
	wrap := func(err error) error { return fmt.Errorf("inbox: verify table %s: %w", table, err) }
	schema, name := splitTable(table)
	var db any // nil: the connection's database
	if schema != "" {
		db = schema
	}
	const where = `TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?`
	var engine sql.NullString
	err := tx.QueryRowContext(ctx, `SELECT ENGINE FROM information_schema.TABLES WHERE `+where, db, name).Scan(&engine)
	if errors.Is(err, sql.ErrNoRows) {
		v.missing = true
		return nil
	}
	if err != nil {
		return wrap(err)
	}
	if !strings.EqualFold(engine.String, "InnoDB") {
		v.flawf("engine %s is not InnoDB: without transactions a key commits even when its effect fails", engine.String)
	}
	rows, err := tx.QueryContext(ctx, `SELECT COLUMN_NAME, DATA_TYPE, COALESCE(CHARACTER_MAXIMUM_LENGTH, 0) FROM information_schema.COLUMNS WHERE `+where+` AND COLUMN_NAME IN ('consumer', 'idem_key', 'fingerprint')`, db, name)
	if err != nil {
		return wrap(err)
	}
	seen := 0
	for rows.Next() {
		var col, typ string
		var n int64
		if err := rows.Scan(&col, &typ, &n); err != nil {
			rows.Close()
			return wrap(err)
		}
		if col == "fingerprint" {
			// A shorter column cuts fingerprints (outside strict mode), and
			// every honest retry would then read as a mismatch.
			if t := strings.ToLower(typ); !strings.HasSuffix(t, "blob") && (t != "varbinary" || n < idem.MaxFingerprintLen) {
				v.flawf("column fingerprint is %s(%d); want VARBINARY(%d)", typ, n, idem.MaxFingerprintLen)
			}
			continue
		}
		seen++
		switch {
		case !strings.EqualFold(typ, "varbinary"):
			v.flawf("column %s is %s; want VARBINARY(255), which compares bytes (a _ci collation makes \"Evt-1\" a duplicate of \"evt-1\", PAD SPACE ones ignore trailing spaces)", col, typ)
		case n < 255:
			v.flawf("column %s holds %d bytes; want 255 (a longer key would be cut or refused)", col, n)
		}
	}
	if err := rows.Err(); err != nil {
		return wrap(err)
	}
	if seen != 2 {
		v.flawf("columns consumer and idem_key not found")
	}
	var triggers string
	err = tx.QueryRowContext(ctx, `SELECT COALESCE(GROUP_CONCAT(TRIGGER_NAME), '') FROM information_schema.TRIGGERS
WHERE EVENT_OBJECT_SCHEMA = COALESCE(?, DATABASE()) AND EVENT_OBJECT_TABLE = ? AND EVENT_MANIPULATION = 'INSERT' AND ACTION_TIMING = 'BEFORE'`, db, name).Scan(&triggers)
	if err != nil {
		return wrap(err)
	}
	if triggers != "" {
		v.flawf("BEFORE INSERT trigger %s can rewrite the key", triggers)
	}
	rows, err = tx.QueryContext(ctx, `SELECT INDEX_NAME, COALESCE(COLUMN_NAME, '(expression)'), SUB_PART IS NOT NULL FROM information_schema.STATISTICS
WHERE `+where+` AND NON_UNIQUE = 0 ORDER BY INDEX_NAME, SEQ_IN_INDEX`, db, name)
	if err != nil {
		return wrap(err)
	}
	defer rows.Close()
	for rows.Next() {
		var idx, col string
		var prefix bool
		if err := rows.Scan(&idx, &col, &prefix); err != nil {
			return wrap(err)
		}
		if n := len(v.indexes); n == 0 || v.indexes[n-1].name != idx {
			v.indexes = append(v.indexes, uniqueIndex{name: idx})
		}
		u := &v.indexes[len(v.indexes)-1]
		u.cols = append(u.cols, col)
		if prefix && u.flaw == "" {
			u.flaw, u.looser = "indexes a prefix of "+col, true
		}
	}
	return wrap0(rows.Err(), wrap)
}
