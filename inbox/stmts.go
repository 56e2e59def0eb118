package inbox

import (
	"context"
	"database/sql"
	"sync"

	"github.com/idem-go/idem/sqldialect"
)

// preparer is implemented by *sql.DB and *sql.Conn.
type preparer interface {
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
}

// maxCachedStmts bounds the prepared statements an Inbox keeps: the single
// insert, the fingerprint read, and the multi-row inserts of the batch sizes
// seen most (consumers use a few fixed sizes).
const maxCachedStmts = 32

// stmts caches prepared statements for SQLite and MySQL, whose drivers
// otherwise parse (SQLite) or prepare and close (MySQL, one round trip each)
// every statement on every call. pgx caches statements itself.
type stmts struct {
	p      preparer
	mu     sync.Mutex
	m      map[string]*sql.Stmt
	missed map[string]struct{} // ran unprepared; prepared after the transaction
}

func newStmts(db Beginner, d sqldialect.Dialect) *stmts {
	p, ok := db.(preparer)
	if !ok || d == sqldialect.Postgres {
		return nil
	}
	return &stmts{p: p, m: make(map[string]*sql.Stmt), missed: make(map[string]struct{})}
}

// get returns query prepared for tx, or nil when it is not cached yet (the
// caller then runs the plain query, and the statement is prepared after the
// transaction by prepareMissed).
//
// It never prepares on the pool itself: inside a transaction that holds
// the pool's only connection (SetMaxOpenConns(1), common with SQLite),
// preparing would wait for that connection forever.
func (s *stmts) get(ctx context.Context, tx *sql.Tx, query string) *sql.Stmt {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	st, ok := s.m[query]
	if !ok && len(s.m)+len(s.missed) < maxCachedStmts {
		s.missed[query] = struct{}{}
	}
	s.mu.Unlock()
	if !ok {
		return nil
	}
	return tx.StmtContext(ctx, st)
}

// prepareMissed prepares, on the pool and outside any transaction, the
// statements that get found uncached. Failures are left for the next time.
func (s *stmts) prepareMissed(ctx context.Context) {
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
		st, err := s.p.PrepareContext(ctx, q)
		if err != nil {
			continue
		}
		s.mu.Lock()
		if _, dup := s.m[q]; dup || len(s.m) >= maxCachedStmts {
			_ = st.Close()
		} else {
			s.m[q] = st
		}
		s.mu.Unlock()
	}
}

func (s *stmts) close() error {
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

// exec runs query in tx, prepared when cached.
func (in *Inbox) exec(ctx context.Context, tx *sql.Tx, query string, args ...any) (sql.Result, error) {
	if st := in.stmts.get(ctx, tx, query); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return tx.ExecContext(ctx, query, args...)
}

// query runs query in tx, prepared when cached.
func (in *Inbox) query(ctx context.Context, tx *sql.Tx, query string, args ...any) (*sql.Rows, error) {
	if st := in.stmts.get(ctx, tx, query); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return tx.QueryContext(ctx, query, args...)
}

// Close releases the statements the Inbox prepared (SQLite and MySQL). It
// does not close the database. Using the Inbox after Close still works, with
// statements prepared again.
func (in *Inbox) Close() error { return in.stmts.close() }
