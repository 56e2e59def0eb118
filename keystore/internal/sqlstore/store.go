// Package sqlstore is the key store on database/sql shared by pgstore and
// sqlitestore. The two differ only in SQL text (queries.go) and in how
// Reserve reads a live key: PostgreSQL's conditional upsert returns it in
// the same statement, SQLite's (which cannot put an upsert in a CTE) is
// followed by a read. Every write is a single statement, atomic by itself.
package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/sqldialect"
)

// Config is what the wrapping packages' options set.
type Config struct {
	Table     string
	Scope     string
	MaxResult int
}

// DefaultTable is the table name unless configured.
const DefaultTable = "idem_keys"

// Store is a keystore.Store on one table, in one scope.
type Store struct {
	db        *sql.DB
	d         sqldialect.Dialect
	q         *queries
	st        *stmts // shared with scoped views
	grp       *group // SQLite: group commit, shared with scoped views; nil for PostgreSQL
	name      string // package name, prefixed to errors
	scope     string
	maxResult int
}

// New validates cfg and returns a store; name prefixes the errors of its
// operations. Errors of New itself carry no prefix: the wrapping package
// adds it, with idem.ErrInvalidOption.
func New(db *sql.DB, d sqldialect.Dialect, name string, cfg Config) (*Store, error) {
	if db == nil {
		return nil, errors.New("nil *sql.DB")
	}
	if err := keystore.ValidateScope(cfg.Scope); err != nil {
		return nil, err
	}
	if cfg.MaxResult < 0 {
		return nil, fmt.Errorf("max result size %d is negative", cfg.MaxResult)
	}
	q, err := newQueries(d, cfg.Table)
	if err != nil {
		return nil, err
	}
	st := &Store{db: db, d: d, q: q, st: &stmts{m: map[string]*sql.Stmt{}}, name: name, scope: cfg.Scope, maxResult: cfg.MaxResult}
	if d == sqldialect.SQLite {
		st.grp = &group{}
	}
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
		return nil, keystore.ErrClosed
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
// views; later calls return keystore.ErrClosed. It does not close the
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

// Scope returns a view of the same table in another scope.
func (s *Store) Scope(name string) (*Store, error) {
	if err := keystore.ValidateScope(name); err != nil {
		return nil, fmt.Errorf("%s: %w", s.name, err)
	}
	v := *s
	v.scope = name
	return &v, nil
}

// MaxResultSize returns the largest result Complete accepts.
func (s *Store) MaxResultSize() int { return s.maxResult }

// MigrationSQL returns the statements Migrate runs.
func (s *Store) MigrationSQL() []string { return append([]string(nil), s.q.migrate...) }

// Migrate creates the table, its expiry index and its token sequence if
// they do not exist, in one transaction.
func (s *Store) Migrate(ctx context.Context) error {
	err := s.retry(ctx, func() error {
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		for _, stmt := range s.q.migrate {
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return err
			}
		}
		return tx.Commit()
	})
	if err != nil {
		return fmt.Errorf("%s: migrate: %w", s.name, err)
	}
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
}

// Reserve implements keystore.Store.Reserve.
func (s *Store) Reserve(ctx context.Context, key string, fp []byte, lease time.Duration) (keystore.Claim, error) {
	if err := keystore.ValidateReserve(key, fp, lease); err != nil {
		return keystore.Claim{}, err
	}
	if len(fp) == 0 {
		fp = nil // stored as NULL: not checked
	}
	var r row
	err := s.retry(ctx, func() error {
		return s.do(ctx, func(ctx context.Context, x runner) (err error) {
			if s.d == sqldialect.Postgres {
				r, err = s.reservePostgres(ctx, x, key, fp, lease)
			} else {
				r, err = s.reserveSQLite(ctx, x, key, fp, lease)
			}
			return err
		})
	})
	if err != nil {
		return keystore.Claim{}, fmt.Errorf("%s: reserve: %w", s.name, err)
	}
	c := keystore.Claim{Key: key, Expires: time.UnixMicro(r.expires.Int64)}
	switch {
	case r.acquired:
		c.State, c.Token, c.Takeover = keystore.Acquired, uint64(r.token.Int64), r.takeovers.Int64 > 0
	case keystore.FingerprintsConflict(r.fp, fp):
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

func (s *Store) reservePostgres(ctx context.Context, x runner, key string, fp []byte, lease time.Duration) (row, error) {
	var r row
	err := x.queryRow(ctx, s.q.reserve, []any{s.scope, []byte(key), fp, micros(lease)},
		&r.acquired, &r.state, &r.token, &r.takeovers, &r.fp, &r.res, &r.expires)
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
func (s *Store) reserveSQLite(ctx context.Context, x runner, key string, fp []byte, lease time.Duration) (row, error) {
	var r row
	err := x.queryRow(ctx, s.q.reserve, []any{s.scope, []byte(key), fp, micros(lease)},
		&r.token, &r.takeovers, &r.expires)
	if err == nil {
		r.acquired = true
		return r, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return r, err
	}
	err = x.queryRow(ctx, s.q.lookup, []any{s.scope, []byte(key)},
		&r.state, &r.token, &r.takeovers, &r.fp, &r.res, &r.expires)
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

// Complete implements keystore.Store.Complete.
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
	err := s.retry(ctx, func() error {
		return s.do(ctx, func(ctx context.Context, x runner) error {
			lost = false
			n, err := x.exec(ctx, s.q.complete, s.scope, []byte(c.Key), int64(c.Token), result, micros(ttl))
			if err != nil || n == 1 {
				return err
			}
			var state int16
			err = x.queryRow(ctx, s.q.tokenOf, []any{s.scope, []byte(c.Key), int64(c.Token)}, &state)
			if errors.Is(err, sql.ErrNoRows) || (err == nil && state != stDone) {
				lost, err = true, nil
			}
			return err
		})
	})
	if err != nil {
		return fmt.Errorf("%s: complete: %w", s.name, err)
	}
	if lost {
		return keystore.LeaseLostError("complete", c.Key, c.Token)
	}
	return nil
}

// Release implements keystore.Store.Release.
func (s *Store) Release(ctx context.Context, c keystore.Claim) error {
	if err := keystore.ValidateRelease(c); err != nil {
		return err
	}
	var n int64
	err := s.retry(ctx, func() error {
		return s.do(ctx, func(ctx context.Context, x runner) (err error) {
			n, err = x.exec(ctx, s.q.release, s.scope, []byte(c.Key), int64(c.Token))
			return err
		})
	})
	if err != nil {
		return fmt.Errorf("%s: release: %w", s.name, err)
	}
	if n == 0 {
		return keystore.LeaseLostError("release", c.Key, c.Token)
	}
	return nil
}

// Sweep implements keystore.Sweeper: one DELETE of at most batch expired
// rows at a time, through the expiry index, until a batch comes back short.
// In PostgreSQL the rows are picked with FOR UPDATE SKIP LOCKED, so sweepers
// on several nodes take disjoint batches instead of queueing.
func (s *Store) Sweep(ctx context.Context, batch int) (int, error) {
	if batch <= 0 {
		return 0, fmt.Errorf("%s: sweep: %w: batch %d is not positive", s.name, keystore.ErrInvalidArgument, batch)
	}
	total := 0
	for {
		var n int64
		err := s.retry(ctx, func() (err error) {
			n, err = runner{s: s}.exec(ctx, s.q.sweep, batch)
			return err
		})
		total += int(n)
		if err != nil {
			return total, fmt.Errorf("%s: sweep: %w", s.name, err)
		}
		if n < int64(batch) {
			return total, nil
		}
	}
}

// retry runs op until it succeeds, fails with an error that is not worth
// retrying, or ctx ends. Serialization failures, deadlocks and a busy
// SQLite are retried with jittered backoff; none of them can have
// committed.
func (s *Store) retry(ctx context.Context, op func() error) error {
	backoff := time.Millisecond
	for attempt := 1; ; attempt++ {
		err := op()
		if err == nil {
			return nil
		}
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			// database/sql reports a transaction that ctx rolled back as
			// ErrTxDone; make the cause visible to errors.Is.
			return errors.Join(err, cerr)
		}
		if attempt == 50 || (!errors.Is(err, errRace) && !s.d.Retryable(err)) {
			return err
		}
		t := time.NewTimer(backoff/2 + rand.N(backoff/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		case <-t.C:
		}
		backoff = min(2*backoff, 100*time.Millisecond)
	}
}
