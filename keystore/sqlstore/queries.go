package sqlstore

import (
	"fmt"
	"strings"

	"github.com/idem-go/idem/sqldialect"
)

// Key states in the state column. An absent key has no row.
const (
	stInProgress = 1
	stDone       = 2
)

// queries holds the SQL text of one table in one dialect. It is written
// once with $n placeholders, which become ?n (SQLite's numbered
// parameters) for SQLite, so both dialects bind arguments in one order.
//
// Times are stored by the database's clock: timestamptz from now() in
// PostgreSQL, integer microseconds since the Unix epoch from julianday('now')
// in SQLite (millisecond resolution). Both dialects return microseconds.
type queries struct {
	migrate []string
	// reserve takes the key when it is absent or expired. PostgreSQL's
	// also returns the live row otherwise; SQLite's returns nothing then,
	// and lookup reads the live row.
	reserve  string
	lookup   string
	complete string
	tokenOf  string
	release  string
	sweep    string
	// Operations' statements (ops.go).
	extend, inspect, list, forget string
}

// nowSQLite is SQLite's clock in microseconds since the Unix epoch.
// julianday('now') is fixed for the duration of one statement.
const nowSQLite = "(CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000)"

func newQueries(d sqldialect.Dialect, table string) (*queries, error) {
	if err := d.ValidateIdentifier(table); err != nil {
		return nil, err
	}
	schema, name := "", table
	if i := strings.IndexByte(table, '.'); i >= 0 {
		schema, name = table[:i+1], table[i+1:]
	}
	if len(name) > 48 {
		return nil, fmt.Errorf("%w: %q: table name longer than 48 bytes leaves no room for its index and sequence names", sqldialect.ErrInvalidIdentifier, table)
	}
	r := strings.NewReplacer("{SEQ}", schema+name+"_token", "{IDX}", name+"_expires_at", "{T}", table)
	var q queries
	switch d {
	case sqldialect.Postgres:
		micros := func(col string) string { return "(extract(epoch FROM " + col + ") * 1000000)::bigint" }
		q = queries{
			migrate: []string{
				`SELECT pg_advisory_xact_lock(7305104735812733)`, // serialise concurrent Migrate calls
				`CREATE TABLE IF NOT EXISTS {T} (
	scope       text        NOT NULL,
	idem_key    bytea       NOT NULL,
	state       smallint    NOT NULL,
	token       bigint      NOT NULL,
	takeovers   integer     NOT NULL DEFAULT 0,
	fingerprint bytea,
	result      bytea,
	expires_at  timestamptz NOT NULL,
	PRIMARY KEY (scope, idem_key)
)`,
				`CREATE INDEX IF NOT EXISTS {IDX} ON {T} (expires_at)`,
				`CREATE SEQUENCE IF NOT EXISTS {SEQ}`,
			},
			// One statement: take the key if absent or expired, else read
			// the live row. The second branch reads the statement's snapshot;
			// when a concurrent writer makes it miss (the row is newer than
			// the snapshot, or was expired in it), it returns nothing and
			// the caller runs the statement again.
			reserve: `WITH up AS (
	INSERT INTO {T} AS t (scope, idem_key, state, token, takeovers, fingerprint, result, expires_at)
	VALUES ($1, $2, 1, nextval('{SEQ}'), 0, $3, NULL, now() + $4::bigint * interval '1 microsecond')
	ON CONFLICT (scope, idem_key) DO UPDATE SET
		state = 1, token = EXCLUDED.token,
		takeovers = CASE WHEN t.state = 1 THEN t.takeovers + 1 ELSE 0 END,
		fingerprint = EXCLUDED.fingerprint, result = NULL, expires_at = EXCLUDED.expires_at
	WHERE t.expires_at <= now()
	RETURNING state, token, takeovers, fingerprint, result, expires_at
)
SELECT true, state, token, takeovers, fingerprint, result, ` + micros("expires_at") + ` FROM up
UNION ALL
SELECT false, state, token, takeovers, fingerprint, result, ` + micros("expires_at") + ` FROM {T}
WHERE scope = $1 AND idem_key = $2 AND expires_at > now() AND NOT EXISTS (SELECT 1 FROM up)`,
			complete: `UPDATE {T} SET state = 2, result = $4, expires_at = now() + $5::bigint * interval '1 microsecond'
WHERE scope = $1 AND idem_key = $2 AND token = $3 AND state = 1`,
			sweep: `DELETE FROM {T} WHERE (scope, idem_key) IN (
	SELECT scope, idem_key FROM {T} WHERE expires_at <= now()
	ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED
) AND expires_at <= now()`,
		}
	case sqldialect.SQLite:
		q = queries{
			migrate: []string{
				`CREATE TABLE IF NOT EXISTS {T} (
	scope       TEXT    NOT NULL,
	idem_key    BLOB    NOT NULL,
	state       INTEGER NOT NULL,
	token       INTEGER NOT NULL,
	takeovers   INTEGER NOT NULL DEFAULT 0,
	fingerprint BLOB,
	result      BLOB,
	expires_at  INTEGER NOT NULL,
	PRIMARY KEY (scope, idem_key)
)`,
				`CREATE INDEX IF NOT EXISTS {IDX} ON {T} (expires_at)`,
				// SQLite has no sequences: one row holds the last token, and
				// triggers advance it in the same statement that hands a token
				// out, so Reserve stays a single statement.
				`CREATE TABLE IF NOT EXISTS {SEQ} (id INTEGER PRIMARY KEY CHECK (id = 1), v INTEGER NOT NULL)`,
				`INSERT OR IGNORE INTO {SEQ} (id, v) VALUES (1, 0)`,
				`CREATE TRIGGER IF NOT EXISTS {SEQ}_insert AFTER INSERT ON {T}
BEGIN UPDATE {SEQ} SET v = NEW.token WHERE id = 1 AND v < NEW.token; END`,
				`CREATE TRIGGER IF NOT EXISTS {SEQ}_update AFTER UPDATE OF token ON {T}
BEGIN UPDATE {SEQ} SET v = NEW.token WHERE id = 1 AND v < NEW.token; END`,
			},
			// Take the key if absent or expired; RETURNING yields no row when
			// the key is live, and the caller then reads it with lookup.
			reserve: `INSERT INTO {T} (scope, idem_key, state, token, takeovers, fingerprint, result, expires_at)
VALUES ($1, $2, 1, (SELECT v + 1 FROM {SEQ} WHERE id = 1), 0, $3, NULL, ` + nowSQLite + ` + $4)
ON CONFLICT (scope, idem_key) DO UPDATE SET
	state = 1, token = excluded.token,
	takeovers = CASE WHEN {T}.state = 1 THEN {T}.takeovers + 1 ELSE 0 END,
	fingerprint = excluded.fingerprint, result = NULL, expires_at = excluded.expires_at
WHERE {T}.expires_at <= ` + nowSQLite + `
RETURNING token, takeovers, expires_at`,
			lookup: `SELECT state, token, takeovers, fingerprint, result, expires_at FROM {T}
WHERE scope = $1 AND idem_key = $2 AND expires_at > ` + nowSQLite,
			complete: `UPDATE {T} SET state = 2, result = $4, expires_at = ` + nowSQLite + ` + $5
WHERE scope = $1 AND idem_key = $2 AND token = $3 AND state = 1`,
			sweep: `DELETE FROM {T} WHERE rowid IN (
	SELECT rowid FROM {T} WHERE expires_at <= ` + nowSQLite + ` ORDER BY expires_at LIMIT $1
)`,
		}
	default:
		return nil, fmt.Errorf("%w: %v has no key store", sqldialect.ErrUnknownDialect, d)
	}
	opsQueries(d, &q)
	q.tokenOf = `SELECT state FROM {T} WHERE scope = $1 AND idem_key = $2 AND token = $3`
	q.release = `DELETE FROM {T} WHERE scope = $1 AND idem_key = $2 AND token = $3 AND state = 1`
	fix := func(s string) string {
		s = r.Replace(s)
		if d == sqldialect.SQLite {
			s = strings.ReplaceAll(s, "$", "?")
		}
		return s
	}
	for i := range q.migrate {
		q.migrate[i] = fix(q.migrate[i])
	}
	for _, p := range []*string{&q.reserve, &q.lookup, &q.complete, &q.tokenOf, &q.release, &q.sweep, &q.extend, &q.inspect, &q.list, &q.forget} {
		*p = fix(*p)
	}
	return &q, nil
}
