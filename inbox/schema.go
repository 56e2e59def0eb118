package inbox

import (
	"strings"

	"github.com/idem-go/idem/sqldialect"
)

// queries holds the SQL text of one Inbox, built once in New.
type queries struct {
	schema      []string
	insert      string // (consumer, key, fingerprint) → rows affected 0 or 1
	fingerprint string // (consumer, key) → fingerprint
	sweep       string // (consumer, older-than µs or ms, limit) → rows deleted
}

// indexName is the (consumer, processed_at) index's name: unqualified,
// derived from the table's own name.
func indexName(table string) string {
	if i := strings.LastIndexByte(table, '.'); i >= 0 {
		table = table[i+1:]
	}
	return table + "_processed_at"
}

// sqliteNowMS is SQLite's clock in Unix milliseconds. It is evaluated by
// SQLite, so every writer of one file uses the same clock.
const sqliteNowMS = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)"

func buildQueries(d sqldialect.Dialect, t string) queries {
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
			insert:      `INSERT INTO ` + t + ` (consumer, idem_key, fingerprint, processed_at) VALUES ($1, $2, $3, now()) ON CONFLICT DO NOTHING`,
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
			insert:      `INSERT INTO ` + t + ` (consumer, idem_key, fingerprint, processed_at) VALUES (?, ?, ?, ` + sqliteNowMS + `) ON CONFLICT DO NOTHING`,
			fingerprint: `SELECT fingerprint FROM ` + t + ` WHERE consumer = ? AND idem_key = ?`,
			sweep: `DELETE FROM ` + t + ` WHERE consumer = ?1 AND idem_key IN (
	SELECT idem_key FROM ` + t + ` WHERE consumer = ?1 AND processed_at < ` + sqliteNowMS + ` - ?2
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
			// ON DUPLICATE KEY UPDATE with no change reports 0 affected rows
			// (the driver's default, clientFoundRows=false); INSERT IGNORE
			// would also swallow unrelated errors.
			insert:      `INSERT INTO ` + t + ` (consumer, idem_key, fingerprint, processed_at) VALUES (?, ?, ?, UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE consumer = consumer`,
			fingerprint: `SELECT fingerprint FROM ` + t + ` WHERE consumer = ? AND idem_key = ? LOCK IN SHARE MODE`,
			sweep:       `DELETE FROM ` + t + ` WHERE consumer = ? AND processed_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND ORDER BY processed_at LIMIT ?`,
		}
	}
	return queries{}
}

// multiInsert returns the multi-row "insert unless present" for n rows, with
// RETURNING idem_key where the dialect has it (PostgreSQL, SQLite).
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
			b.WriteString("," + sqliteNowMS + ")")
		case sqldialect.MySQL:
			b.WriteString(",UTC_TIMESTAMP(6))")
		}
	}
	switch d {
	case sqldialect.MySQL:
		b.WriteString(" ON DUPLICATE KEY UPDATE consumer = consumer")
	default:
		b.WriteString(" ON CONFLICT DO NOTHING RETURNING idem_key")
	}
	return b.String()
}
