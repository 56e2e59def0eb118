package rows

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/inbox/internal/engine"
)

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
	schema, name := engine.SplitTable(table)
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
