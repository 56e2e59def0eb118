package engine

import (
	"context"
	"database/sql"
	"sync"

	"github.com/idem-go/idem/sqldialect"
)

// Preparer is implemented by *sql.DB and *sql.Conn.
type Preparer interface {
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
}

// MaxCachedStmts bounds the prepared statements an Inbox keeps: the single
// insert, the fingerprint read, and the multi-row inserts of the batch sizes
// seen most (consumers use a few fixed sizes).
const MaxCachedStmts = 32

// Stmts caches prepared statements for SQLite and MySQL, whose drivers
// otherwise parse (SQLite) or prepare and close (MySQL, one round trip each)
// every statement on every call. pgx caches statements itself.
type Stmts struct {
	P      Preparer
	mu     sync.Mutex
	m      map[string]*sql.Stmt
	missed map[string]struct{} // ran unprepared; prepared after the transaction
}

// NewStmts returns the cache for db, or nil where none is kept.
func NewStmts(db Beginner, d sqldialect.Dialect) *Stmts {
	p, ok := db.(Preparer)
	if !ok || d == sqldialect.Postgres {
		return nil
	}
	return &Stmts{P: p, m: make(map[string]*sql.Stmt), missed: make(map[string]struct{})}
}

// Get returns query prepared for tx, or nil when it is not cached yet (the
// caller then runs the plain query, and the statement is prepared after the
// transaction by PrepareMissed).
//
// It never prepares on the pool itself: inside a transaction that holds
// the pool's only connection (SetMaxOpenConns(1), common with SQLite),
// preparing would wait for that connection forever.
func (s *Stmts) Get(ctx context.Context, tx *sql.Tx, query string) *sql.Stmt {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	st, ok := s.m[query]
	if !ok && len(s.m)+len(s.missed) < MaxCachedStmts {
		s.missed[query] = struct{}{}
	}
	s.mu.Unlock()
	if !ok {
		return nil
	}
	return tx.StmtContext(ctx, st)
}

// PrepareMissed prepares, on the pool and outside any transaction, the
// statements that Get found uncached. Failures are left for the next time.
func (s *Stmts) PrepareMissed(ctx context.Context) {
	if s == nil {
		return
	}
	s.mu.Lock()
	if len(s.missed) == 0 {
		s.mu.Unlock()
		return
	}
	qs := make([]string, 0, len(s.missed))
	for q := range s.missed {
		qs = append(qs, q)
	}
	clear(s.missed)
	s.mu.Unlock()
	for _, q := range qs {
		st, err := s.P.PrepareContext(ctx, q)
		if err != nil {
			continue
		}
		s.mu.Lock()
		_, dup := s.m[q]
		keep := !dup && len(s.m) < MaxCachedStmts
		if keep {
			s.m[q] = st
		}
		s.mu.Unlock()
		if !keep {
			_ = st.Close() // not under s.mu: see bucket.State's txStmt
		}
	}
}

// Close closes the prepared statements.
func (s *Stmts) Close() error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var first error
	for q, st := range s.m {
		if err := st.Close(); err != nil && first == nil {
			first = err
		}
		delete(s.m, q)
	}
	return first
}

// Exec runs query in tx, prepared when cached.
func (s *Stmts) Exec(ctx context.Context, tx *sql.Tx, query string, args ...any) (sql.Result, error) {
	if st := s.Get(ctx, tx, query); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return tx.ExecContext(ctx, query, args...)
}

// Query runs query in tx, prepared when cached.
func (s *Stmts) Query(ctx context.Context, tx *sql.Tx, query string, args ...any) (*sql.Rows, error) {
	if st := s.Get(ctx, tx, query); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return tx.QueryContext(ctx, query, args...)
}
