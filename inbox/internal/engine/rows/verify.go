package rows

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/idem-go/idem/inbox/internal/engine"
	"github.com/idem-go/idem/sqldialect"
)

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

// Verify checks, with the database's catalog, that the rows table t
// enforces exactly the uniqueness the inbox relies on (see inbox.Verify).
// mismatch turns a failure into the dialect mismatch error when the
// database is not of d, or returns nil.
func Verify(ctx context.Context, db engine.Beginner, d sqldialect.Dialect, t string, mismatch func(error) error) error {
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true}) // only reads: on SQLite, no write lock
	if err != nil {
		return fmt.Errorf("inbox: verify table %s: begin: %w", t, err)
	}
	defer tx.Rollback()
	var v verifier
	switch d {
	case sqldialect.Postgres:
		err = v.postgres(ctx, tx, t)
	case sqldialect.SQLite:
		err = v.sqlite(ctx, tx, t)
	case sqldialect.MySQL:
		err = v.mysql(ctx, tx, t)
	}
	if err != nil {
		if m := mismatch(err); m != nil {
			return m
		}
		return err
	}
	return v.judge(t)
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
		return fmt.Errorf("inbox: table %s does not exist: call Migrate or apply SchemaSQL(): %w", table, engine.ErrNotMigrated)
	}
	if len(v.flaws) > 0 {
		return fmt.Errorf("inbox: table %s: %s: %w", table, strings.Join(v.flaws, "; "), engine.ErrUnsafeTable)
	}
	exact := false
	var found []string
	for _, u := range v.indexes {
		found = append(found, u.String())
		both := slices.Contains(u.cols, "consumer") && slices.Contains(u.cols, "idem_key")
		if u.looser {
			return fmt.Errorf("inbox: table %s: unique index %v: two distinct keys can collide in it, and the second message would be dropped as a duplicate: %w", table, u, engine.ErrUnsafeTable)
		}
		if !both {
			return fmt.Errorf("inbox: table %s: unique index %v does not contain both consumer and idem_key: it rejects some fresh messages, which the inbox would then drop as duplicates; drop it: %w", table, u, engine.ErrUnsafeTable)
		}
		if len(u.cols) == 2 && u.flaw == "" {
			exact = true
		}
	}
	if !exact {
		if len(found) == 0 {
			found = []string{"none"}
		}
		return fmt.Errorf("inbox: table %s has no unique index or primary key on exactly (consumer, idem_key) (found: %s): every redelivery would be applied again; a wider key such as (consumer, idem_key, processed_at) does not dedupe: %w", table, strings.Join(found, "; "), engine.ErrUnsafeTable)
	}
	return nil
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
