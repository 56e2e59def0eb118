package sqlstore

import (
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/idem-go/idem/internal/digest"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/sqldialect"
)

// Layout is how a table stores its keys. [Store.Migrate] creates new tables
// in [LayoutDigest] and keeps a table made by an earlier release in
// [LayoutRows]; [Store.MigrateLayout] moves one to the digest layout.
type Layout int

const (
	// LayoutDigest (the default for new tables) keys each row by a 16-byte
	// digest of (scope, key): SHA-256 of the table's random salt, kept in
	// TABLE_meta, followed by the scope, a zero byte and the key, cut to 16
	// bytes. The scope and key are kept, unindexed, in the row's name
	// column, and every statement on a key matches both, so a digest
	// collision can never make two keys one: a Reserve that meets a live
	// row with its digest but another name fails with [ErrDigestCollision].
	LayoutDigest Layout = iota + 1
	// LayoutRows is the layout of releases before the digest layout: the
	// primary key is (scope, idem_key), two variable-length columns that
	// the primary-key index repeats.
	LayoutRows
)

func (l Layout) String() string {
	switch l {
	case LayoutDigest:
		return "digest"
	case LayoutRows:
		return "rows"
	}
	return "Layout(" + strconv.Itoa(int(l)) + ")"
}

// ErrDigestCollision is wrapped by the error of a Reserve whose key has the
// same 16-byte digest as another live key in the table. With random keys
// the chance that any two of n keys collide is about n²/2¹²⁹ (3×10⁻¹⁹ for
// 10¹⁰ keys); the row's name is compared on every read, so a collision is
// an error, never a false duplicate.
var ErrDigestCollision = errors.New("sqlstore: digest collision")

// errLayoutChanged: a statement met a table of another layout (another
// process ran MigrateLayout); the layout is read again and the call rerun.
var errLayoutChanged = errors.New("the table's layout changed")

// layout is the detected layout of the table, with its statements.
type layout struct {
	q    *queries
	salt []byte // LayoutDigest
}

// shared is the state of one table that a Store shares with its scoped
// views.
type shared struct {
	n          names
	rows, dig  *queries
	salt       []byte // a new table's salt, in SchemaSQL
	cur        atomic.Pointer[layout]
	detectOnce sync.Mutex
	// digest is sum of salt and name; tests replace it to make collisions.
	digest func(salt, name []byte) [16]byte
}

// sum is the digest of a name under salt (internal/digest: the layout
// the inbox's buckets share).
func sum(salt, name []byte) [16]byte { return digest.Sum(salt, name) }

// keyName is a key's name column: the scope, a zero byte (which no scope
// holds) and the key.
func keyName(scope, key string) []byte {
	b := make([]byte, 0, len(scope)+1+len(key))
	return append(append(append(b, scope...), 0), key...)
}

// param is a digest as the driver binds it: uuid text on PostgreSQL, bytes
// on SQLite.
func (s *Store) param(d [16]byte) any { return digest.Param(s.d, d) }

// keyArgs are the first two arguments of every statement on one key.
func (s *Store) keyArgs(l *layout, key string) []any {
	if l.q.layout == LayoutRows {
		return []any{s.scope, []byte(key)}
	}
	name := keyName(s.scope, key)
	return []any{s.param(s.sh.digest(l.salt, name)), name}
}

// lockKey is the key's advisory lock number on PostgreSQL (see the
// reserve statement): 32 bits of its digest, or of the name's hash in the
// rows layout. Two keys that share it only wait for each other.
func (s *Store) lockKey(l *layout, key string) int32 {
	d := sum(l.salt, keyName(s.scope, key))
	if l.q.layout == LayoutDigest {
		d = s.sh.digest(l.salt, keyName(s.scope, key))
	}
	return int32(binary.BigEndian.Uint32(d[:4]))
}

// args are keyArgs followed by more.
func (s *Store) args(l *layout, key string, more ...any) []any {
	return append(s.keyArgs(l, key), more...)
}

// collision is the error of a Reserve that met another key's live row.
func (s *Store) collision(l *layout, key string) error {
	d := s.sh.digest(l.salt, keyName(s.scope, key))
	return fmt.Errorf("sqlstore: reserve %q in scope %q: a live row of another key has its digest %s: %w", key, s.scope, hex.EncodeToString(d[:]), ErrDigestCollision)
}

// write runs op in the table's current layout, through the group commit
// (SQLite) and retry; an op that met another layout runs again on the
// layout read afresh.
func (s *Store) write(ctx context.Context, op func(ctx context.Context, l *layout, x runner) error) error {
	return s.retry(ctx, func() error {
		l, err := s.current(ctx)
		if err != nil {
			return err
		}
		return s.changed(l, s.do(ctx, func(ctx context.Context, x runner) error { return op(ctx, l, x) }))
	})
}

// values is the VALUES list of a multi-row INSERT of rows rows of eight
// columns; expr turns column c's placeholder p into its SQL expression.
func values(d sqldialect.Dialect, rows int, expr func(c int, p string) string) string {
	var b strings.Builder
	for i := range rows {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('(')
		for c := range 8 {
			if c > 0 {
				b.WriteString(", ")
			}
			b.WriteString(expr(c, d.Placeholder(8*i+c+1)))
		}
		b.WriteByte(')')
	}
	return b.String()
}

// current returns the table's layout, reading it from the database the
// first time and after a statement met another layout.
func (s *Store) current(ctx context.Context) (*layout, error) {
	if l := s.sh.cur.Load(); l != nil {
		return l, nil
	}
	s.sh.detectOnce.Lock()
	defer s.sh.detectOnce.Unlock()
	if l := s.sh.cur.Load(); l != nil {
		return l, nil
	}
	l, err := s.detect(ctx, s.db)
	if err != nil {
		return nil, err
	}
	s.sh.cur.Store(l)
	return l, nil
}

// Layout returns the layout of the store's table, as the database has it
// now.
func (s *Store) Layout(ctx context.Context) (Layout, error) {
	s.sh.cur.Store(nil)
	l, err := s.current(ctx)
	if err != nil {
		return 0, fmt.Errorf("sqlstore: layout: %w", err)
	}
	return l.q.layout, nil
}

// querier is a *sql.DB or a *sql.Tx.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// errNoTable: neither layout's table exists. It wraps
// keystore.ErrNotMigrated, on which idemhttp and idemgrpc branch.
var errNoTable = fmt.Errorf("table does not exist (call Migrate or apply SchemaSQL): %w", keystore.ErrNotMigrated)

// detect reads which layout the table has: the digest layout if its meta
// table exists, the rows layout if only the key table does. It returns
// errNoTable if neither exists.
func (s *Store) detect(ctx context.Context, q querier) (*layout, error) {
	var table, meta bool
	var err error
	if s.d == sqldialect.Postgres {
		err = q.QueryRowContext(ctx, `SELECT to_regclass($1::text) IS NOT NULL, to_regclass($2::text) IS NOT NULL`, s.sh.n.table, s.sh.n.meta).Scan(&table, &meta)
	} else {
		err = q.QueryRowContext(ctx, `SELECT
	(SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1) > 0,
	(SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?2) > 0`, s.sh.n.table, s.sh.n.meta).Scan(&table, &meta)
	}
	switch {
	case err != nil:
		return nil, err
	case meta:
		var salt []byte
		if err := q.QueryRowContext(ctx, `SELECT value FROM `+s.sh.n.meta+` WHERE name = 'salt'`).Scan(&salt); err != nil {
			return nil, fmt.Errorf("reading the salt of %s: %w", s.sh.n.meta, err)
		}
		return &layout{q: s.sh.dig, salt: salt}, nil
	case table:
		return &layout{q: s.sh.rows}, nil
	}
	return nil, fmt.Errorf("%s: %w", s.sh.n.table, errNoTable)
}

// changed turns the error of a statement run in layout l that met a table
// of another layout into errLayoutChanged, after which the layout is read
// again.
func (s *Store) changed(l *layout, err error) error {
	if err == nil || !s.schemaError(err) {
		return err
	}
	s.sh.cur.CompareAndSwap(l, nil)
	return fmt.Errorf("%w: %w", errLayoutChanged, err)
}

// schemaError reports whether err says that a statement's table or column
// does not exist, or that its table changed under a prepared statement.
func (s *Store) schemaError(err error) bool {
	if s.d == sqldialect.Postgres {
		var e interface{ SQLState() string }
		if errors.As(err, &e) {
			switch e.SQLState() {
			case "42703", "42P01", "42P10", "0A000": // undefined column, table; no ON CONFLICT index; cached plan changed
				return true
			}
		}
		return false
	}
	var e interface{ Code() int }
	if errors.As(err, &e) && e.Code()&0xff == 17 { // SQLITE_SCHEMA
		return true
	}
	m := err.Error()
	return strings.Contains(m, "no such column") || strings.Contains(m, "no such table") || strings.Contains(m, "has no column named")
}

// MigrateLayout moves a table of the rows layout to the digest layout, in
// one transaction; on a table already in the digest layout it does
// nothing. It copies every row that is still visible (in progress, or done
// and not expired) with its token, takeovers, fingerprint, result and
// expiry, drops the old table and gives the new one its name. The token
// sequence (or SQLite's counter) is kept, so tokens keep increasing.
//
// Writers wait while it runs (PostgreSQL: an ACCESS EXCLUSIVE lock on the
// table; SQLite: the write lock), so no key can be reserved in one layout
// while it is live in the other; reads made by this release after the
// switch notice the new layout and run again on it. A process of an
// earlier release gets errors from the new table, never a wrong answer:
// upgrade them all before migrating. The time it takes grows with the live
// keys (docs/keystore.md gives a measured rate).
func (s *Store) MigrateLayout(ctx context.Context) error {
	err := s.retry(ctx, func() error { return s.migrateLayout(ctx) })
	s.sh.cur.Store(nil)
	if err != nil {
		return fmt.Errorf("sqlstore: migrate layout: %w", err)
	}
	return nil
}

// copyPage is the number of rows MigrateLayout copies per statement.
const copyPage = 500

func (s *Store) migrateLayout(ctx context.Context) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	pg := s.d == sqldialect.Postgres
	if pg {
		if _, err := tx.ExecContext(ctx, migrateLock); err != nil {
			return err
		}
	}
	l, err := s.detect(ctx, tx)
	if err != nil {
		return err
	}
	if l.q.layout == LayoutDigest {
		return tx.Commit()
	}
	n := s.sh.n
	tmp := n.table + "_mig"
	ddl := []string{}
	if pg {
		ddl = append(ddl, `LOCK TABLE `+n.table+` IN ACCESS EXCLUSIVE MODE`)
	}
	ddl = append(append(ddl, digestMeta(s.d, n, s.sh.salt)...), digestTable(s.d, n, tmp))
	if err := execAll(ctx, tx, ddl); err != nil {
		return err
	}
	var salt []byte
	if err := tx.QueryRowContext(ctx, `SELECT value FROM `+n.meta+` WHERE name = 'salt'`).Scan(&salt); err != nil {
		return err
	}
	if err := s.copyRows(ctx, tx, tmp, salt); err != nil {
		return err
	}
	ddl = append([]string{`DROP TABLE ` + n.table, `ALTER TABLE ` + tmp + ` RENAME TO ` + n.name}, digestFinish(s.d, n)...)
	if err := execAll(ctx, tx, ddl); err != nil {
		return err
	}
	return tx.Commit()
}

func execAll(ctx context.Context, q querier, stmts []string) error {
	for _, st := range stmts {
		if _, err := q.ExecContext(ctx, st); err != nil {
			return err
		}
	}
	return nil
}

// oldRow is a row of the rows layout being copied.
type oldRow struct {
	scope           string
	key             []byte
	state           int16
	token, takeover int64
	fp, res         []byte
	expires         int64
}

// copyRows copies the visible rows of the rows-layout table into tmp, a
// page at a time in primary-key order.
func (s *Store) copyRows(ctx context.Context, tx *sql.Tx, tmp string, salt []byte) error {
	now, micros, exp := nowSQLite, "expires_at", "$8"
	cols := []string{"", "", "", "", "", "", "", ""}
	if s.d == sqldialect.Postgres {
		now, micros = "now()", pgMicros("expires_at")
		cols = []string{"::uuid", "::bytea", "::smallint", "::bigint", "::integer", "::bytea", "::bytea", ""}
		exp = "timestamptz 'epoch' + $8::bigint * interval '1 microsecond'"
	}
	sel := `SELECT scope, idem_key, state, token, takeovers, fingerprint, result, ` + micros + ` FROM ` + s.sh.n.table + `
WHERE (scope, idem_key) > ($1, $2) AND (state = 1 OR expires_at > ` + now + `)
ORDER BY scope, idem_key LIMIT ` + strconv.Itoa(copyPage)
	if s.d == sqldialect.SQLite {
		sel = strings.ReplaceAll(sel, "$", "?")
	}
	lastScope, lastKey := "", []byte{}
	for {
		page, err := readPage(ctx, tx, sel, lastScope, lastKey)
		if err != nil || len(page) == 0 {
			return err
		}
		args := make([]any, 0, 8*len(page))
		for _, r := range page {
			name := keyName(r.scope, string(r.key))
			args = append(args, s.param(s.sh.digest(salt, name)), name, r.state, r.token, r.takeover, r.fp, r.res, r.expires)
		}
		insert := `INSERT INTO ` + tmp + ` (d, name, state, token, takeovers, fingerprint, result, expires_at) VALUES ` +
			values(s.d, len(page), func(c int, p string) string {
				if c == 7 {
					return strings.ReplaceAll(exp, "$8", p)
				}
				return p + cols[c]
			})
		if _, err := tx.ExecContext(ctx, insert, args...); err != nil {
			if s.d.IsUniqueViolation(err) {
				return fmt.Errorf("two keys of the old table share a digest (choose another salt by dropping %s and migrating again): %w", s.sh.n.meta, ErrDigestCollision)
			}
			return err
		}
		last := page[len(page)-1]
		lastScope, lastKey = last.scope, last.key
		if len(page) < copyPage {
			return nil
		}
	}
}

func readPage(ctx context.Context, tx *sql.Tx, sel, scope string, key []byte) ([]oldRow, error) {
	rows, err := tx.QueryContext(ctx, sel, scope, key)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var page []oldRow
	for rows.Next() {
		var r oldRow
		if err := rows.Scan(&r.scope, &r.key, &r.state, &r.token, &r.takeover, &r.fp, &r.res, &r.expires); err != nil {
			return nil, err
		}
		page = append(page, r)
	}
	return page, rows.Err()
}
