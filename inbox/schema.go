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

	horizonTable string // the key table's horizon table (see horizon.go)
	horizonRaise string // (consumer, horizon µs) → stored horizon = max(stored, given)
	horizonSet   string // (consumer, horizon µs) → stored horizon = given
	horizonRead  string // (consumer) → stored horizon µs, NULL if none
}

// horizonTableName is the name of the table that records each consumer's
// redelivery horizon next to the key table t: t + "_horizon", in t's
// schema.
func horizonTableName(t string) string { return t + "_horizon" }

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
	q := keyQueries(d, t)
	h := horizonTableName(t)
	q.horizonTable = h
	// MAX: a horizon table made by hand without its primary key may hold
	// several rows for a consumer; the largest binds.
	q.horizonRead = `SELECT MAX(horizon_us) FROM ` + h + ` WHERE consumer = ` + d.Placeholder(1)
	switch d {
	case sqldialect.Postgres:
		q.schema = append(q.schema, `CREATE TABLE IF NOT EXISTS `+h+` (
	consumer   text        PRIMARY KEY,
	horizon_us bigint      NOT NULL,
	updated_at timestamptz NOT NULL DEFAULT now()
)`)
		ins := `INSERT INTO ` + h + ` (consumer, horizon_us, updated_at) VALUES ($1, $2, now()) ON CONFLICT (consumer) DO UPDATE SET horizon_us = excluded.horizon_us, updated_at = now()`
		q.horizonSet = ins
		q.horizonRaise = ins + ` WHERE ` + tableRef(h) + `.horizon_us < excluded.horizon_us`
	case sqldialect.SQLite:
		q.schema = append(q.schema, `CREATE TABLE IF NOT EXISTS `+h+` (
	consumer   TEXT    PRIMARY KEY,
	horizon_us INTEGER NOT NULL,
	updated_at INTEGER NOT NULL -- Unix milliseconds, SQLite's clock
) WITHOUT ROWID`)
		ins := `INSERT INTO ` + h + ` (consumer, horizon_us, updated_at) VALUES (?1, ?2, ` + sqliteNowMS + `) ON CONFLICT (consumer) DO UPDATE SET horizon_us = excluded.horizon_us, updated_at = excluded.updated_at`
		q.horizonSet = ins
		q.horizonRaise = ins + ` WHERE ` + h + `.horizon_us < excluded.horizon_us`
	case sqldialect.MySQL:
		q.schema = append(q.schema, `CREATE TABLE IF NOT EXISTS `+h+` (
	consumer   VARBINARY(255) NOT NULL PRIMARY KEY,
	horizon_us BIGINT         NOT NULL,
	updated_at DATETIME(6)    NOT NULL
) ENGINE=InnoDB`)
		ins := `INSERT INTO ` + h + ` (consumer, horizon_us, updated_at) VALUES (?, ?, UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE `
		q.horizonSet = ins + `horizon_us = VALUES(horizon_us), updated_at = VALUES(updated_at)`
		// Assignments run left to right: updated_at tests the old value.
		q.horizonRaise = ins + `updated_at = IF(horizon_us < VALUES(horizon_us), VALUES(updated_at), updated_at), horizon_us = GREATEST(horizon_us, VALUES(horizon_us))`
	}
	return q
}

// tableRef is how an ON CONFLICT clause names the existing row: the table's
// own name, without its schema.
func tableRef(name string) string {
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		return name[i+1:]
	}
	return name
}

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
			insert:      `INSERT INTO ` + t + ` (consumer, idem_key, fingerprint, processed_at) VALUES (?, ?, ?, ` + sqliteNowMS + `) ON CONFLICT (consumer, idem_key) DO NOTHING`,
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
			b.WriteString("," + sqliteNowMS + ")")
		case sqldialect.MySQL:
			b.WriteString(",UTC_TIMESTAMP(6))")
		}
	}
	if d != sqldialect.MySQL { // MySQL: a plain INSERT, failing with 1062 if any key is recorded
		b.WriteString(" ON CONFLICT (consumer, idem_key) DO NOTHING RETURNING idem_key")
	}
	return b.String()
}
