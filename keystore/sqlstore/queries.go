package sqlstore

import (
	"fmt"
	"strings"

	"github.com/idem-go/idem/internal/digest"
	"github.com/idem-go/idem/sqldialect"
)

// Key states in the state column. An absent key has no row.
const (
	stInProgress = 1
	stDone       = 2
)

// queries holds the SQL text of one table in one dialect and one layout.
// It is written once with $n placeholders, which become ?n (SQLite's
// numbered parameters) for SQLite, so both dialects bind arguments in one
// order.
//
// Every statement on one key takes the key as its first two arguments
// (keyArgs): (scope, key) in the rows layout, (digest, name) in the digest
// layout, where name is scope, a zero byte and the key.
//
// Times are stored by the database's clock: timestamptz from now() in
// PostgreSQL, integer microseconds since the Unix epoch from julianday('now')
// in SQLite (millisecond resolution). Both dialects return microseconds.
type queries struct {
	layout Layout
	// reserve takes the key when it is absent or expired. PostgreSQL's
	// also returns the live row otherwise; SQLite's returns nothing then,
	// and lookup reads the live row (Peek's read in both dialects). Both
	// report whether the live row is this key's (a digest collision makes
	// it another's).
	reserve  string
	lookup   string
	complete string
	tokenOf  string
	release  string
	sweep    string
	// completeNotify and releaseNotify are complete and release that also
	// notify the table's channel (PostgreSQL, a store WithListener).
	completeNotify, releaseNotify string
	// Operations' statements (ops.go).
	extend, inspect, list, forget string
}

// names are the schema objects of one table.
type names struct {
	table string // as given: [schema.]name
	name  string // the table part
	meta  string // [schema.]name_meta: the digest layout's salt
	seq   string // [schema.]name_token: the token sequence or counter table
}

func tableNames(d sqldialect.Dialect, table string) (names, error) {
	if err := d.ValidateIdentifier(table); err != nil {
		return names{}, err
	}
	schema, name := "", table
	if i := strings.IndexByte(table, '.'); i >= 0 {
		schema, name = table[:i+1], table[i+1:]
	}
	if len(name) > 48 {
		return names{}, fmt.Errorf("%w: %q: table name longer than 48 bytes leaves no room for its index and sequence names", sqldialect.ErrInvalidIdentifier, table)
	}
	return names{table: table, name: name, meta: table + "_meta", seq: schema + name + "_token"}, nil
}

// reserveLockClass is the first key of the PostgreSQL advisory locks that
// Reserve takes (the two-integer form, a space apart from single-bigint
// locks).
const reserveLockClass = "730510"

// nowSQLite is SQLite's clock in microseconds since the Unix epoch.
// julianday('now') is fixed for the duration of one statement.
const nowSQLite = "(CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000)"

// pgMicros converts a timestamptz column to microseconds since the epoch.
func pgMicros(col string) string { return "(extract(epoch FROM " + col + ") * 1000000)::bigint" }

// rowsSchema is the table of the rows layout, as releases before the digest
// layout created it: Migrate keeps it for such a table.
func rowsSchema(d sqldialect.Dialect, n names) []string {
	r := strings.NewReplacer("{SEQ}", n.seq, "{IDX}", n.name+"_expires_at", "{T}", n.table)
	var ddl []string
	switch d {
	case sqldialect.Postgres:
		ddl = []string{
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
		}
	case sqldialect.SQLite:
		ddl = append([]string{
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
		}, sqliteCounter()...)
	}
	for i := range ddl {
		ddl[i] = r.Replace(ddl[i])
	}
	return ddl
}

// sqliteCounter is SQLite's token counter: SQLite has no sequences, so one
// row holds the last token, and triggers advance it in the same statement
// that hands a token out, so Reserve stays a single statement. The
// triggers go with the key table; the counter outlives it.
func sqliteCounter() []string {
	return []string{
		`CREATE TABLE IF NOT EXISTS {SEQ} (id INTEGER PRIMARY KEY CHECK (id = 1), v INTEGER NOT NULL)`,
		`INSERT OR IGNORE INTO {SEQ} (id, v) VALUES (1, 0)`,
		`CREATE TRIGGER IF NOT EXISTS {SEQ}_insert AFTER INSERT ON {T}
BEGIN UPDATE {SEQ} SET v = NEW.token WHERE id = 1 AND v < NEW.token; END`,
		`CREATE TRIGGER IF NOT EXISTS {SEQ}_update AFTER UPDATE OF token ON {T}
BEGIN UPDATE {SEQ} SET v = NEW.token WHERE id = 1 AND v < NEW.token; END`,
	}
}

// digestSchema is the digest layout: the meta table with the table's salt,
// then the key table, its expiry index and the token sequence or counter.
// The key table is created as table (the {NEW} of digestTable), then
// finished by digestFinish; MigrateLayout creates it under another name and
// renames it in between.
func digestSchema(d sqldialect.Dialect, n names, salt []byte) []string {
	ddl := append(digestMeta(d, n, salt), digestTable(d, n, n.table))
	return append(ddl, digestFinish(d, n)...)
}

func digestMeta(d sqldialect.Dialect, n names, salt []byte) []string {
	return []string{
		digest.MetaTable(d, n.meta),
		`INSERT INTO ` + n.meta + ` (name, value) VALUES ('salt', ` + digest.Literal(d, salt) + `) ON CONFLICT (name) DO NOTHING`,
	}
}

// digestTable creates the key table of the digest layout named table. On
// PostgreSQL the columns are ordered for alignment and there are eight, so
// that a row with NULLs keeps the 24-byte tuple header; d is a uuid, 16
// bytes without a length header, as in the PK index. On SQLite the table
// keeps its rowid, so rows stay in arrival order and the random digest
// order is only the unique index's (digestFinish): a Complete then writes
// a recent, shared page of the table, not the random page of its key (a
// WITHOUT ROWID table keyed by d ran Reserve + Complete at 0.2-0.7x of the
// rows layout at 200k keys, two random pages written per key).
func digestTable(d sqldialect.Dialect, n names, table string) string {
	if d == sqldialect.Postgres {
		return `CREATE TABLE IF NOT EXISTS ` + table + ` (
	d           uuid        NOT NULL,
	expires_at  timestamptz NOT NULL,
	token       bigint      NOT NULL,
	takeovers   integer     NOT NULL DEFAULT 0,
	state       smallint    NOT NULL,
	name        bytea       NOT NULL,
	fingerprint bytea,
	result      bytea,
	CONSTRAINT ` + n.name + `_digest PRIMARY KEY (d)
)`
	}
	return `CREATE TABLE IF NOT EXISTS ` + table + ` (
	d           BLOB    NOT NULL,
	expires_at  INTEGER NOT NULL,
	token       INTEGER NOT NULL,
	takeovers   INTEGER NOT NULL DEFAULT 0,
	state       INTEGER NOT NULL,
	name        BLOB    NOT NULL,
	fingerprint BLOB,
	result      BLOB
)`
}

// digestFinish creates what goes with the key table once it has its name:
// the expiry index and the token sequence, or SQLite's digest index,
// counter and triggers.
func digestFinish(d sqldialect.Dialect, n names) []string {
	ddl := []string{`CREATE INDEX IF NOT EXISTS {IDX} ON {T} (expires_at)`}
	if d == sqldialect.Postgres {
		ddl = append(ddl, `CREATE SEQUENCE IF NOT EXISTS {SEQ}`)
	} else {
		ddl = append(ddl, `CREATE UNIQUE INDEX IF NOT EXISTS {DIG} ON {T} (d)`)
		ddl = append(ddl, sqliteCounter()...)
	}
	r := strings.NewReplacer("{SEQ}", n.seq, "{IDX}", n.name+"_expiry", "{DIG}", n.name+"_digest", "{T}", n.table)
	for i := range ddl {
		ddl[i] = r.Replace(ddl[i])
	}
	return ddl
}

// newQueries returns the statements of layout l on table n.
func newQueries(d sqldialect.Dialect, n names, l Layout) *queries {
	// match is the WHERE clause of one key; cols its columns in a SELECT
	// list, last the flag saying whether the row is this key's.
	match, keyCols, same := "scope = $1 AND idem_key = $2", "scope, idem_key", "true"
	conflict, sameT, sameX := "scope, idem_key", "", ""
	if l == LayoutDigest {
		match, keyCols, same = "d = $1 AND name = $2", "d, name", "name = $2"
		conflict, sameT, sameX = "d", " AND t.name = EXCLUDED.name", " AND {T}.name = excluded.name"
	}
	if d == sqldialect.SQLite && l == LayoutRows {
		same = "1"
	}
	setName := ""
	if l == LayoutDigest {
		setName = "name = EXCLUDED.name, "
	}
	var q queries
	switch d {
	case sqldialect.Postgres:
		// One statement: take the key if absent or expired, else read the
		// live row. The second branch reads the statement's snapshot; when
		// a concurrent writer makes it miss (the row is newer than the
		// snapshot, or was expired in it), it returns nothing and the
		// caller runs the statement again. The live row is looked up by
		// the key's index alone (the digest), so that a collision shows.
		//
		// The token is drawn after a transaction-scoped advisory lock on
		// the key ($5, lockKey): an insert that waits on a concurrent
		// Release of the key keeps the token drawn before it waited, and
		// without the lock a Reserve could meanwhile draw, take and release
		// a higher one.
		lookupBy, keyTypes := match, "$1::text, $2::bytea"
		if l == LayoutDigest {
			lookupBy, keyTypes = "d = $1", "$1::uuid, $2::bytea"
		}
		q = queries{
			reserve: `WITH lk AS (SELECT pg_advisory_xact_lock(` + reserveLockClass + `, $5::integer)),
up AS (
	INSERT INTO {T} AS t (` + keyCols + `, state, token, takeovers, fingerprint, result, expires_at)
	SELECT ` + keyTypes + `, 1, ` + pgNextToken + `, 0, $3::bytea, NULL::bytea, now() + $4::bigint * interval '1 microsecond' FROM lk
	ON CONFLICT (` + conflict + `) DO UPDATE SET
		` + setName + `state = 1, token = GREATEST(EXCLUDED.token, t.token + 1),
		takeovers = CASE WHEN t.state = 1` + sameT + ` THEN t.takeovers + 1 ELSE 0 END,
		fingerprint = EXCLUDED.fingerprint, result = NULL, expires_at = EXCLUDED.expires_at
	WHERE t.expires_at <= now()
	RETURNING state, token, takeovers, fingerprint, result, expires_at
)
SELECT true, state, token, takeovers, fingerprint, result, ` + pgMicros("expires_at") + `, true FROM up
UNION ALL
SELECT false, state, token, takeovers, fingerprint, result, ` + pgMicros("expires_at") + `, ` + same + ` FROM {T}
WHERE ` + lookupBy + ` AND expires_at > now() AND NOT EXISTS (SELECT 1 FROM up)`,
			// lookup is the statement's second branch alone: Peek's read,
			// which takes no lock and writes nothing.
			lookup: `SELECT state, token, takeovers, fingerprint, result, ` + pgMicros("expires_at") + `, ` + same + ` FROM {T}
WHERE ` + lookupBy + ` AND expires_at > now()`,
			complete: `UPDATE {T} SET state = 2, result = $4, expires_at = now() + $5::bigint * interval '1 microsecond'
WHERE ` + match + ` AND token = $3 AND state = 1`,
			// The notifying forms notify the table's channel with the key's
			// notification id ($6, $4; notify.go) when they change a row:
			// PostgreSQL delivers it to the listeners at commit.
			completeNotify: `WITH u AS (UPDATE {T} SET state = 2, result = $4, expires_at = now() + $5::bigint * interval '1 microsecond'
WHERE ` + match + ` AND token = $3 AND state = 1 RETURNING 1)
SELECT pg_notify('{CHAN}', $6::text) FROM u`,
			releaseNotify: `WITH u AS (DELETE FROM {T} WHERE ` + match + ` AND token = $3 AND state = 1 RETURNING 1)
SELECT pg_notify('{CHAN}', $4::text) FROM u`,
		}
		if l == LayoutDigest {
			q.sweep = `DELETE FROM {T} WHERE d IN (
	SELECT d FROM {T} WHERE expires_at <= now()
	ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED
) AND expires_at <= now()`
		} else {
			q.sweep = `DELETE FROM {T} WHERE (scope, idem_key) IN (
	SELECT scope, idem_key FROM {T} WHERE expires_at <= now()
	ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED
) AND expires_at <= now()`
		}
	case sqldialect.SQLite:
		lookupBy := match
		if l == LayoutDigest {
			lookupBy = "d = $1 AND length($2) >= 0" // binds $2, matches by d alone
		}
		if l == LayoutDigest {
			setName = "name = excluded.name, "
		}
		q = queries{
			// Take the key if absent or expired; RETURNING yields no row when
			// the key is live, and the caller then reads it with lookup.
			reserve: `INSERT INTO {T} (` + keyCols + `, state, token, takeovers, fingerprint, result, expires_at)
VALUES ($1, $2, 1, ` + sqliteNextToken + `, 0, $3, NULL, ` + nowSQLite + ` + $4)
ON CONFLICT (` + conflict + `) DO UPDATE SET
	` + setName + `state = 1, token = max(excluded.token, {T}.token + 1),
	takeovers = CASE WHEN {T}.state = 1` + sameX + ` THEN {T}.takeovers + 1 ELSE 0 END,
	fingerprint = excluded.fingerprint, result = NULL, expires_at = excluded.expires_at
WHERE {T}.expires_at <= ` + nowSQLite + `
RETURNING token, takeovers, expires_at`,
			lookup: `SELECT state, token, takeovers, fingerprint, result, expires_at, ` + same + ` FROM {T}
WHERE ` + lookupBy + ` AND expires_at > ` + nowSQLite,
			complete: `UPDATE {T} SET state = 2, result = $4, expires_at = ` + nowSQLite + ` + $5
WHERE ` + match + ` AND token = $3 AND state = 1`,
			sweep: `DELETE FROM {T} WHERE rowid IN (
	SELECT rowid FROM {T} WHERE expires_at <= ` + nowSQLite + ` ORDER BY expires_at LIMIT $1
)`,
		}
	}
	q.layout = l
	opsQueries(d, l, match, &q)
	q.tokenOf = `SELECT state FROM {T} WHERE ` + match + ` AND token = $3`
	q.release = `DELETE FROM {T} WHERE ` + match + ` AND token = $3 AND state = 1`
	r := strings.NewReplacer("{SEQ}", n.seq, "{T}", n.table, "{CHAN}", notifyChannel(n.table))
	for _, p := range []*string{&q.reserve, &q.lookup, &q.complete, &q.tokenOf, &q.release, &q.completeNotify, &q.releaseNotify, &q.sweep, &q.extend, &q.inspect, &q.list, &q.forget} {
		*p = r.Replace(*p)
		if d == sqldialect.SQLite {
			*p = strings.ReplaceAll(*p, "$", "?")
		}
	}
	return &q
}
