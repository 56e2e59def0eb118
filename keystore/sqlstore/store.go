package sqlstore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/option"
	"github.com/idem-go/idem/internal/retry"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/sqldialect"
)

// DefaultTable is the table name unless [WithTable] says otherwise.
const DefaultTable = "idem_keys"

// config is what the options set.
type config struct {
	table       string
	scope       string
	maxResult   int
	replication func(sqldialect.Replication) // replication.go
	wait        sqldialect.ReplicaWait       // waitreplicas.go
	listener    Listener                     // notify.go
}

// Option configures [New]. Options are checked once, by New; a bad one makes
// New return an error wrapping idem.ErrInvalidOption.
type Option func(*config) error

// WithTable sets the table, plain or, on PostgreSQL, schema-qualified
// (default [DefaultTable]). The name is validated as a plain identifier,
// never quoted; the table part may be at most 48 bytes, since the expiry
// index (TABLE_expires_at) and the token sequence or counter table
// (TABLE_token) are named after it.
func WithTable(name string) Option {
	return func(c *config) error { c.table = name; return nil }
}

// WithScope sets the scope of the store's keys (default
// keystore.DefaultScope). See also [Store.Scope].
func WithScope(name string) Option {
	return func(c *config) error { c.scope = name; return nil }
}

// WithMaxResultSize sets the largest result Complete accepts, in bytes
// (default keystore.DefaultMaxResultSize).
func WithMaxResultSize(n int) Option {
	return option.Check("sqlstore", n >= 0, func(c *config) { c.maxResult = n }, "max result size %d is negative", n)
}

// Store is a [keystore.Store] on one table, in one scope. It also
// implements [keystore.Scoper], [keystore.Sweeper], [keystore.Extender],
// [keystore.Inspector] and [keystore.Forgetter]. It is safe for concurrent
// use. See the package documentation.
type Store struct {
	db        *sql.DB
	d         sqldialect.Dialect
	sh        *shared // the table, shared with scoped views
	st        *stmts  // shared with scoped views
	grp       *group  // SQLite: group commit, shared with scoped views; nil for PostgreSQL
	scope     string
	maxResult int
	// replication is WithReplicationCheck's function, or nil.
	replication func(sqldialect.Replication)
	// wait is WithWaitReplicas's; Standbys 0: writes are not waited for.
	wait sqldialect.ReplicaWait
	// wake is the listening connection of WithListener (PostgreSQL), shared
	// with scoped views; nil: Notify is unsupported.
	wake *wake
}

var (
	_ keystore.Scoper    = (*Store)(nil)
	_ keystore.Sweeper   = (*Store)(nil)
	_ keystore.Extender  = (*Store)(nil)
	_ keystore.Inspector = (*Store)(nil)
	_ keystore.Forgetter = (*Store)(nil)
	_ keystore.Notifier  = (*Store)(nil)
)

// New returns a store on db in dialect d: sqldialect.Postgres, with a
// driver whose errors expose SQLState (pgx's "pgx" driver does), or
// sqldialect.SQLite, a modernc.org/sqlite database opened with
// sqldialect.SQLiteDSN (see package sqlitestore for the recommended
// set-up). MySQL is not supported. New does not touch the database; call
// [Store.Migrate] once, or create the table with [Store.SchemaSQL] in your
// own migration tool. A nil db, another dialect or a bad option returns an
// error wrapping idem.ErrInvalidOption.
func New(db *sql.DB, d sqldialect.Dialect, opts ...Option) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("sqlstore: nil *sql.DB: %w", idem.ErrInvalidOption)
	}
	cfg := config{table: DefaultTable, scope: keystore.DefaultScope, maxResult: keystore.DefaultMaxResultSize}
	if err := option.Apply("sqlstore", &cfg, opts); err != nil {
		return nil, err
	}
	if err := keystore.ValidateScope(cfg.scope); err != nil {
		return nil, fmt.Errorf("sqlstore: %w: %w", err, idem.ErrInvalidOption)
	}
	if d != sqldialect.Postgres && d != sqldialect.SQLite {
		return nil, fmt.Errorf("sqlstore: %w: %v has no key store: %w", sqldialect.ErrUnknownDialect, d, idem.ErrInvalidOption)
	}
	if cfg.wait.Standbys > 0 && d != sqldialect.Postgres {
		return nil, fmt.Errorf("sqlstore: WithWaitReplicas: %v has no standbys to wait for (PostgreSQL only): %w", d, idem.ErrInvalidOption)
	}
	n, err := tableNames(d, cfg.table)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: %w: %w", err, idem.ErrInvalidOption)
	}
	sh := &shared{n: n, rows: newQueries(d, n, LayoutRows), dig: newQueries(d, n, LayoutDigest), salt: make([]byte, 16), digest: sum}
	_, _ = rand.Read(sh.salt)
	st := &Store{db: db, d: d, sh: sh, st: &stmts{m: map[string]*sql.Stmt{}}, scope: cfg.scope, maxResult: cfg.maxResult, replication: cfg.replication, wait: cfg.wait}
	if d == sqldialect.SQLite {
		st.grp = &group{}
	}
	if cfg.listener != nil && d != sqldialect.Postgres {
		return nil, fmt.Errorf("sqlstore: WithListener: %v has no notifications (PostgreSQL only): %w", d, idem.ErrInvalidOption)
	}
	st.wake = newWake(d, cfg.listener, n.table)
	return st, nil
}

// stmts are the store's prepared statements, prepared on first use (the
// table may not exist before Migrate). database/sql prepares each on every
// connection that runs it; modernc.org/sqlite would otherwise parse the SQL
// on every call, which costs more than running it.
type stmts struct {
	mu     sync.Mutex
	closed bool
	m      map[string]*sql.Stmt
}

// prep returns the prepared statement for query.
func (s *Store) prep(ctx context.Context, query string) (*sql.Stmt, error) {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	if s.st.closed {
		return nil, idem.ErrClosed
	}
	if st, ok := s.st.m[query]; ok {
		return st, nil
	}
	st, err := s.db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	s.st.m[query] = st
	return st, nil
}

// cached returns the prepared statement for query if there is one.
func (s *Store) cached(query string) (*sql.Stmt, bool) {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	st, ok := s.st.m[query]
	return st, ok && !s.st.closed
}

// Close releases the prepared statements of the store and its scoped
// views; later calls return idem.ErrClosed. It does not close the
// *sql.DB.
func (s *Store) Close() error {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	if s.st.closed {
		return nil
	}
	s.st.closed = true
	var errs []error
	for _, st := range s.st.m {
		errs = append(errs, st.Close())
	}
	s.st.m = nil
	return errors.Join(errs...)
}

// Scope returns a view of the same table in which keys live in the scope
// name; the view shares the store's statements (and Close). It implements
// [keystore.Scoper].
func (s *Store) Scope(name string) (keystore.Store, error) {
	if err := keystore.ValidateScope(name); err != nil {
		return nil, fmt.Errorf("sqlstore: %w", err)
	}
	v := *s
	v.scope = name
	return &v, nil
}

// MaxResultSize returns the largest result Complete accepts.
func (s *Store) MaxResultSize() int { return s.maxResult }

// SchemaSQL returns the statements [Store.Migrate] runs on a database
// without the table, for migration tools: a new table in [LayoutDigest],
// with the salt this Store drew (a second run keeps the first salt). They
// are idempotent (IF NOT EXISTS).
func (s *Store) SchemaSQL() []string {
	return append([]string(nil), digestSchema(s.d, s.sh.n, s.sh.salt)...)
}

// migrateLock serialises Migrate and MigrateLayout calls on PostgreSQL.
const migrateLock = `SELECT pg_advisory_xact_lock(7305104735812733)`

// Migrate creates the table in [LayoutDigest] if it does not exist: its
// meta table with a random salt, the key table, its expiry index and its
// token sequence (PostgreSQL) or one-row token counter table (SQLite), in
// one transaction. A table made by an earlier release keeps [LayoutRows]
// (Migrate only completes its schema; see [Store.MigrateLayout]). On
// PostgreSQL it takes a transaction-scoped advisory lock, so several nodes
// may call it at start-up at once. A dialect that does not match the
// database fails with an error wrapping [sqldialect.ErrWrongDialect] that
// names the dialect to pass. With [WithReplicationCheck] it ends by
// reporting how the database acknowledges commits relative to its
// standbys.
func (s *Store) Migrate(ctx context.Context) error {
	err := s.retry(ctx, func() error {
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if s.d == sqldialect.Postgres {
			if _, err := tx.ExecContext(ctx, migrateLock); err != nil {
				return err
			}
		}
		ddl := digestSchema(s.d, s.sh.n, s.sh.salt)
		l, err := s.detect(ctx, tx)
		switch {
		case err == nil && l.q.layout == LayoutRows:
			ddl = rowsSchema(s.d, s.sh.n)
		case err != nil && !errors.Is(err, errNoTable):
			return err
		}
		if err := execAll(ctx, tx, ddl); err != nil {
			return err
		}
		return tx.Commit()
	})
	s.sh.cur.Store(nil)
	if err != nil {
		if m := s.d.Mismatch(ctx, s.db, "the key store", err); m != nil {
			return fmt.Errorf("sqlstore: migrate: %w", m)
		}
		return fmt.Errorf("sqlstore: migrate: %w", err)
	}
	s.checkReplication(ctx) // replication.go
	return nil
}

// errRace marks a PostgreSQL Reserve whose snapshot missed a concurrent
// change; the statement is simply run again.
var errRace = errors.New("concurrent change")

// row is a key's row as Reserve reads it.
type row struct {
	acquired  bool
	state     sql.NullInt16
	token     sql.NullInt64
	takeovers sql.NullInt64
	fp, res   []byte
	expires   sql.NullInt64 // µs since the epoch
	same      bool          // the live row is this key's, not a digest collision's
}

// Reserve implements [keystore.Store.Reserve] in one statement: an upsert
// that takes the key only when it is absent or expired by the database's
// clock, with the next token. On PostgreSQL the same statement reads a live
// row; on SQLite (which cannot put an upsert in a CTE) a second statement
// does. Atomic: if the process or the connection dies, the row was either
// written whole or not at all.
func (s *Store) Reserve(ctx context.Context, key string, fp []byte, lease time.Duration) (keystore.Claim, error) {
	if err := keystore.ValidateReserve(key, fp, lease); err != nil {
		return keystore.Claim{}, err
	}
	if len(fp) == 0 {
		fp = nil // stored as NULL: not checked
	}
	var (
		r row
		l *layout
	)
	err := s.write(ctx, func(ctx context.Context, cur *layout, x runner) (err error) {
		l = cur
		if s.d == sqldialect.Postgres {
			r, err = s.reservePostgres(ctx, x, l, key, fp, lease)
		} else {
			r, err = s.reserveSQLite(ctx, x, l, key, fp, lease)
		}
		return err
	})
	if err != nil {
		if notReplicated(err) && r.acquired {
			s.releaseUnreplicated(ctx, l, key, r.token.Int64)
		}
		return keystore.Claim{}, fmt.Errorf("sqlstore: reserve: %w", err)
	}
	c := keystore.Claim{Key: key, Expires: time.UnixMicro(r.expires.Int64)}
	switch {
	case !r.acquired && !r.same:
		return keystore.Claim{}, s.collision(l, key)
	case r.acquired:
		c.State, c.Token, c.Takeover = keystore.Acquired, uint64(r.token.Int64), r.takeovers.Int64 > 0
	case idem.FingerprintsConflict(r.fp, fp):
		return keystore.Claim{}, keystore.MismatchError(key)
	case r.state.Int16 == stInProgress:
		c.State = keystore.InProgress
	default:
		c.State, c.Result = keystore.Done, r.res
		if c.Result == nil {
			c.Result = []byte{}
		}
	}
	return c, nil
}

func (s *Store) reservePostgres(ctx context.Context, x runner, l *layout, key string, fp []byte, lease time.Duration) (row, error) {
	var r row
	err := x.queryRow(ctx, l.q.reserve, s.args(l, key, fp, micros(lease), s.lockKey(l, key)),
		&r.acquired, &r.state, &r.token, &r.takeovers, &r.fp, &r.res, &r.expires, &r.same)
	if errors.Is(err, sql.ErrNoRows) {
		return r, errRace
	}
	return r, err
}

// reserveSQLite takes the key with one upsert, or reads the live row with
// a second statement. Run alone, without a transaction around the two, the
// row may change in between: if the read finds no live row, the caller runs
// both again. A read that finds one is a correct answer as of that read, and
// the upsert wrote nothing. In a group's transaction the two are atomic.
func (s *Store) reserveSQLite(ctx context.Context, x runner, l *layout, key string, fp []byte, lease time.Duration) (row, error) {
	var r row
	args := s.keyArgs(l, key)
	err := x.queryRow(ctx, l.q.reserve, append(args, fp, micros(lease)),
		&r.token, &r.takeovers, &r.expires)
	if err == nil {
		r.acquired, r.same = true, true
		return r, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return r, err
	}
	err = x.queryRow(ctx, l.q.lookup, args[:2],
		&r.state, &r.token, &r.takeovers, &r.fp, &r.res, &r.expires, &r.same)
	if errors.Is(err, sql.ErrNoRows) {
		return r, errRace
	}
	return r, err
}

// micros is a lease or TTL in whole microseconds, the unit of the SQL
// arithmetic: capped at keystore.MaxDuration (about 3.2e15 µs, far inside
// PostgreSQL's interval and timestamptz ranges and int64 arithmetic in
// SQLite) and rounded up, so that a lease below 1 µs is not one of 0 that
// has ended before Reserve returns.
func micros(d time.Duration) int64 {
	d = keystore.CapDuration(d)
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}

// Complete implements [keystore.Store.Complete] with one conditional UPDATE
// (token and state must match); the TTL runs from the database's now() at
// completion. If the connection drops while the UPDATE commits, the caller
// gets an error but the result may be stored; Complete again with the same
// claim to find out (it returns nil if it was).
func (s *Store) Complete(ctx context.Context, c keystore.Claim, result []byte, ttl time.Duration) error {
	if err := keystore.ValidateComplete(c, result, ttl, s.maxResult); err != nil {
		return err
	}
	if result == nil {
		result = []byte{}
	}
	// Nothing updated means that this claim completed already (a retried
	// Complete whose first reply was lost) or that the lease is gone; the
	// second statement tells which.
	var lost bool
	err := s.write(ctx, func(ctx context.Context, l *layout, x runner) error {
		lost = false
		q, args := l.q.complete, s.args(l, c.Key, int64(c.Token), result, micros(ttl))
		if s.wake != nil {
			q, args = l.q.completeNotify, append(args, s.notifyID(c.Key))
		}
		n, err := x.exec(ctx, q, args...)
		if err != nil || n == 1 {
			return err
		}
		var state int16
		err = x.queryRow(ctx, l.q.tokenOf, s.args(l, c.Key, int64(c.Token)), &state)
		if errors.Is(err, sql.ErrNoRows) || (err == nil && state != stDone) {
			lost, err = true, nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlstore: complete: %w", err)
	}
	if lost {
		return keystore.LeaseLostError("complete", c.Key, c.Token)
	}
	return nil
}

// Release implements [keystore.Store.Release] with one conditional DELETE.
func (s *Store) Release(ctx context.Context, c keystore.Claim) error {
	if err := keystore.ValidateRelease(c); err != nil {
		return err
	}
	var n int64
	err := s.write(ctx, func(ctx context.Context, l *layout, x runner) (err error) {
		q, args := l.q.release, s.args(l, c.Key, int64(c.Token))
		if s.wake != nil {
			q, args = l.q.releaseNotify, append(args, s.notifyID(c.Key))
		}
		n, err = x.exec(ctx, q, args...)
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlstore: release: %w", err)
	}
	if n == 0 {
		return keystore.LeaseLostError("release", c.Key, c.Token)
	}
	return nil
}

// Sweep implements [keystore.Sweeper]: one DELETE of at most batch expired
// rows at a time, through the expiry index, until a batch comes back short.
// In PostgreSQL the rows are picked with FOR UPDATE SKIP LOCKED, so sweepers
// on several nodes take disjoint batches instead of queueing.
func (s *Store) Sweep(ctx context.Context, batch int) (int, error) {
	if batch <= 0 {
		return 0, fmt.Errorf("sqlstore: sweep: batch %d is not positive: %w", batch, idem.ErrInvalidArgument)
	}
	total := 0
	for {
		var n int64
		err := s.retry(ctx, func() error {
			l, err := s.current(ctx)
			if err != nil {
				return err
			}
			n, err = runner{s: s}.exec(ctx, l.q.sweep, batch)
			return s.changed(l, err)
		})
		total += int(n)
		if err != nil {
			return total, fmt.Errorf("sqlstore: sweep: %w", err)
		}
		if n < int64(batch) {
			return total, nil
		}
	}
}

// conflictBackoff spaces the retries of a statement that met a
// serialization failure, a deadlock or a busy SQLite.
var conflictBackoff = retry.Backoff{Min: time.Millisecond, Max: 100 * time.Millisecond}

// retry runs op until it succeeds, fails with an error that is not worth
// retrying, or ctx ends. Serialization failures, deadlocks and a busy
// SQLite are retried with jittered backoff; none of them can have
// committed.
func (s *Store) retry(ctx context.Context, op func() error) error {
	for attempt := 0; ; attempt++ {
		err := op()
		if err == nil {
			return nil
		}
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			// database/sql reports a transaction that ctx rolled back as
			// ErrTxDone; make the cause visible to errors.Is.
			return errors.Join(err, cerr)
		}
		if attempt == 49 || (!errors.Is(err, errRace) && !errors.Is(err, errLayoutChanged) && !s.d.Retryable(err)) {
			return err
		}
		if werr := conflictBackoff.Wait(ctx, attempt); werr != nil {
			return errors.Join(err, werr)
		}
	}
}
