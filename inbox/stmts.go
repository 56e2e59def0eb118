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
	p  preparer
	mu sync.Mutex
	m  map[string]*sql.Stmt
}

func newStmts(db Beginner, d sqldialect.Dialect) *stmts {
	p, ok := db.(preparer)
	if !ok || d == sqldialect.Postgres {
		return nil
	}
	return &stmts{p: p, m: make(map[string]*sql.Stmt)}
}

// get returns query prepared for tx, or nil when it is not cached (the caller
// then runs the plain query).
func (s *stmts) get(ctx context.Context, tx *sql.Tx, query string) *sql.Stmt {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	st, ok := s.m[query]
	if !ok && len(s.m) < maxCachedStmts {
		var err error
		if st, err = s.p.PrepareContext(ctx, query); err == nil {
			s.m[query] = st
		}
	}
	s.mu.Unlock()
	if st == nil {
		return nil
	}
	return tx.StmtContext(ctx, st)
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
