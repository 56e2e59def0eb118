package rows

import (
	"strings"

	"github.com/idem-go/idem/inbox/internal/engine"
	"github.com/idem-go/idem/sqldialect"
)

// queries holds the SQL text of one table, built once.
type queries struct {
	schema      []string
	insert      string // (consumer, key, fingerprint) → rows affected 0 or 1
	fingerprint string // (consumer, key) → fingerprint
	sweep       string // (consumer, older-than µs or ms, limit) → rows deleted
}

// indexName is the (consumer, processed_at) index's name: unqualified,
// derived from the table's own name.
func indexName(table string) string {
	return engine.TableRef(table) + "_processed_at"
}

// Schema returns the statements that create the rows table t and its
// index (the horizon table is the inbox's).
func Schema(d sqldialect.Dialect, t string) []string { return keyQueries(d, t).schema }

// keyQueries builds the key table's statements.
func keyQueries(d sqldialect.Dialect, t string) queries {
	idx := indexName(t)
	switch d {
	case sqldialect.Postgres:
		return queries{
			schema: []string{
				`CREATE TABLE IF NOT EXISTS ` + t + ` (
	consumer     text        NOT NULL,
	idem_key     text        NOT NULL,
	fingerprint  bytea,
	processed_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (consumer, idem_key)
)`,
				`CREATE INDEX IF NOT EXISTS ` + idx + ` ON ` + t + ` (consumer, processed_at)`,
			},
			insert:      `INSERT INTO ` + t + ` (consumer, idem_key, fingerprint, processed_at) VALUES ($1, $2, $3, now()) ON CONFLICT (consumer, idem_key) DO NOTHING`,
			fingerprint: `SELECT fingerprint FROM ` + t + ` WHERE consumer = $1 AND idem_key = $2`,
			sweep: `DELETE FROM ` + t + ` WHERE consumer = $1 AND idem_key IN (
	SELECT idem_key FROM ` + t + ` WHERE consumer = $1 AND processed_at < now() - $2 * interval '1 microsecond'
	ORDER BY processed_at LIMIT $3 FOR UPDATE SKIP LOCKED)`,
		}
	case sqldialect.SQLite:
		return queries{
			schema: []string{
				`CREATE TABLE IF NOT EXISTS ` + t + ` (
	consumer     TEXT    NOT NULL,
	idem_key     TEXT    NOT NULL,
	fingerprint  BLOB,
	processed_at INTEGER NOT NULL, -- Unix milliseconds, SQLite's clock
	PRIMARY KEY (consumer, idem_key)
) WITHOUT ROWID`,
				`CREATE INDEX IF NOT EXISTS ` + idx + ` ON ` + t + ` (consumer, processed_at)`,
			},
			insert:      `INSERT INTO ` + t + ` (consumer, idem_key, fingerprint, processed_at) VALUES (?, ?, ?, ` + engine.SQLiteNowMS + `) ON CONFLICT (consumer, idem_key) DO NOTHING`,
			fingerprint: `SELECT fingerprint FROM ` + t + ` WHERE consumer = ? AND idem_key = ?`,
			sweep: `DELETE FROM ` + t + ` WHERE consumer = ?1 AND idem_key IN (
	SELECT idem_key FROM ` + t + ` WHERE consumer = ?1 AND processed_at < ` + engine.SQLiteNowMS + ` - ?2
	ORDER BY processed_at LIMIT ?3)`,
		}
	case sqldialect.MySQL:
		return queries{
			schema: []string{
				// VARBINARY: keys compare byte for byte. A case-insensitive
				// collation would make "Evt-1" a duplicate of "evt-1".
				`CREATE TABLE IF NOT EXISTS ` + t + ` (
	consumer     VARBINARY(255) NOT NULL,
	idem_key     VARBINARY(255) NOT NULL,
	fingerprint  VARBINARY(64)  NULL,
	processed_at DATETIME(6)    NOT NULL,
	PRIMARY KEY (consumer, idem_key),
	KEY ` + idx + ` (consumer, processed_at)
) ENGINE=InnoDB`,
			},
			// A plain INSERT: a recorded key fails it with error 1062,
			// which rolls back that statement only, never the transaction
			// (see insertOne). Its outcome does not depend on the DSN: ON
			// DUPLICATE KEY UPDATE with no change reports 1 affected row
			// under clientFoundRows=true, which would apply every duplicate,
			// and INSERT IGNORE would also swallow unrelated errors.
			insert:      `INSERT INTO ` + t + ` (consumer, idem_key, fingerprint, processed_at) VALUES (?, ?, ?, UTC_TIMESTAMP(6))`,
			fingerprint: `SELECT fingerprint FROM ` + t + ` WHERE consumer = ? AND idem_key = ? LOCK IN SHARE MODE`,
			sweep:       `DELETE FROM ` + t + ` WHERE consumer = ? AND processed_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND ORDER BY processed_at LIMIT ?`,
		}
	}
	return queries{}
}

// multiInsert returns the multi-row "insert unless present" for n rows, with
// RETURNING idem_key where the dialect has it (PostgreSQL, SQLite). On MySQL
// it is a plain INSERT that fails whole (error 1062) when any key is
// recorded.
func multiInsert(d sqldialect.Dialect, t string, n int) string {
	var b strings.Builder
	b.WriteString("INSERT INTO " + t + " (consumer, idem_key, fingerprint, processed_at) VALUES ")
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('(')
		b.WriteString(d.Placeholders(3*i+1, 3))
		switch d {
		case sqldialect.Postgres:
			b.WriteString(",now())")
		case sqldialect.SQLite:
			b.WriteString("," + engine.SQLiteNowMS + ")")
		case sqldialect.MySQL:
			b.WriteString(",UTC_TIMESTAMP(6))")
		}
	}
	if d != sqldialect.MySQL { // MySQL: a plain INSERT, failing with 1062 if any key is recorded
		b.WriteString(" ON CONFLICT (consumer, idem_key) DO NOTHING RETURNING idem_key")
	}
	return b.String()
}
