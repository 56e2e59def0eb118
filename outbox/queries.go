package outbox

import "github.com/idem-go/idem/sqldialect"

type queries struct {
	schema []string
	insert string // id, topic, key, payload, headers
	claim  string // limit → seq, id, topic, key, payload, headers
	unsent string // → a row if any message is unsent (SQLite: read before the write lock)
	heads  string // keys, max seq → (key, seq) of every unsent row of those keys up to max seq
	mark   string // seq list appended
	sweep  string // age, limit
}

const sqliteNowMS = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)"

func buildQueries(d sqldialect.Dialect, t string) queries {
	switch d {
	case sqldialect.Postgres:
		return queries{
			schema: []string{
				`CREATE TABLE IF NOT EXISTS ` + t + ` (
	seq        bigserial   PRIMARY KEY,
	id         text        NOT NULL UNIQUE,
	topic      text        NOT NULL,
	msg_key    text        NOT NULL,
	payload    bytea,
	headers    bytea,
	created_at timestamptz NOT NULL DEFAULT now(),
	sent_at    timestamptz
)`,
				// Unsent rows only: the relay's scans stay small however
				// many sent rows wait for the sweep. The first serves the
				// claim (in seq order), the second the per-key order check.
				`CREATE INDEX IF NOT EXISTS ` + t + `_unsent ON ` + t + ` (seq) WHERE sent_at IS NULL`,
				`CREATE INDEX IF NOT EXISTS ` + t + `_unsent_key ON ` + t + ` (msg_key, seq) WHERE sent_at IS NULL`,
				`CREATE INDEX IF NOT EXISTS ` + t + `_sent ON ` + t + ` (sent_at) WHERE sent_at IS NOT NULL`,
			},
			insert: `INSERT INTO ` + t + ` (id, topic, msg_key, payload, headers) VALUES ($1, $2, $3, $4, $5)`,
			claim:  `SELECT seq, id, topic, msg_key, payload, headers FROM ` + t + ` WHERE sent_at IS NULL ORDER BY seq LIMIT $1 FOR UPDATE SKIP LOCKED`,
			heads:  `SELECT msg_key, seq FROM ` + t + ` WHERE sent_at IS NULL AND msg_key = ANY($1) AND seq <= $2 ORDER BY seq`,
			mark:   `UPDATE ` + t + ` SET sent_at = now() WHERE seq = ANY($1)`,
			sweep:  `DELETE FROM ` + t + ` WHERE seq IN (SELECT seq FROM ` + t + ` WHERE sent_at IS NOT NULL AND sent_at < now() - $1 * interval '1 microsecond' ORDER BY sent_at LIMIT $2 FOR UPDATE SKIP LOCKED)`,
		}
	case sqldialect.SQLite:
		return queries{
			schema: []string{
				`CREATE TABLE IF NOT EXISTS ` + t + ` (
	seq        INTEGER PRIMARY KEY AUTOINCREMENT,
	id         TEXT    NOT NULL UNIQUE,
	topic      TEXT    NOT NULL,
	msg_key    TEXT    NOT NULL,
	payload    BLOB,
	headers    BLOB,
	created_at INTEGER NOT NULL DEFAULT (` + sqliteNowMS + `),
	sent_at    INTEGER
)`,
				`CREATE INDEX IF NOT EXISTS ` + t + `_unsent ON ` + t + ` (seq) WHERE sent_at IS NULL`,
				`CREATE INDEX IF NOT EXISTS ` + t + `_sent ON ` + t + ` (sent_at) WHERE sent_at IS NOT NULL`,
			},
			insert: `INSERT INTO ` + t + ` (id, topic, msg_key, payload, headers) VALUES (?, ?, ?, ?, ?)`,
			// SQLite has one writer: the relay's BEGIN IMMEDIATE already
			// excludes other relays, so no row locks are needed.
			claim: `SELECT seq, id, topic, msg_key, payload, headers FROM ` + t + ` WHERE sent_at IS NULL ORDER BY seq LIMIT ?`,
			// Read outside a transaction, which in WAL mode takes no lock:
			// an idle relay then never takes the write lock a poll.
			unsent: `SELECT 1 FROM ` + t + ` WHERE sent_at IS NULL LIMIT 1`,
			mark:   `UPDATE ` + t + ` SET sent_at = ` + sqliteNowMS + ` WHERE seq IN (SELECT value FROM json_each(?))`,
			sweep:  `DELETE FROM ` + t + ` WHERE seq IN (SELECT seq FROM ` + t + ` WHERE sent_at IS NOT NULL AND sent_at < ` + sqliteNowMS + ` - ? ORDER BY sent_at LIMIT ?)`,
		}
	}
	return queries{}
}
