package pgstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/internal/sqlstore"
	"github.com/idem-go/idem/sqldialect"
)

// DefaultTable is the table name unless WithTable says otherwise.
const DefaultTable = sqlstore.DefaultTable

// Option configures [New].
type Option func(*sqlstore.Config)

// WithTable sets the table, plain or schema-qualified (default
// [DefaultTable]). The name is validated as a plain identifier, never
// quoted; the table part may be at most 48 bytes, since the expiry index
// (TABLE_expires_at) and the token sequence (TABLE_token) are named after it.
func WithTable(name string) Option { return func(c *sqlstore.Config) { c.Table = name } }

// WithScope sets the scope of the store's keys (default
// keystore.DefaultScope). See also [Store.Scope].
func WithScope(name string) Option { return func(c *sqlstore.Config) { c.Scope = name } }

// WithMaxResultSize sets the largest result Complete accepts, in bytes
// (default keystore.DefaultMaxResultSize).
func WithMaxResultSize(n int) Option { return func(c *sqlstore.Config) { c.MaxResult = n } }

// Store is a [keystore.Store] on a PostgreSQL table. See the package
// documentation.
type Store struct{ s *sqlstore.Store }

// New returns a store on db, which must use a PostgreSQL driver whose errors
// expose SQLState (pgx's "pgx" driver does). It does not touch the database;
// call [Store.Migrate] once, or create the table with [Store.MigrationSQL]
// in your own migration tool. Bad options return an error wrapping
// idem.ErrInvalidOption.
func New(db *sql.DB, opts ...Option) (*Store, error) {
	cfg := sqlstore.Config{Table: DefaultTable, Scope: keystore.DefaultScope, MaxResult: keystore.DefaultMaxResultSize}
	for _, o := range opts {
		o(&cfg)
	}
	s, err := sqlstore.New(db, sqldialect.Postgres, "pgstore", cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: pgstore: %w", idem.ErrInvalidOption, err)
	}
	return &Store{s: s}, nil
}

// Migrate creates the table, its expiry index and the token sequence if they
// do not exist. It takes a transaction-scoped advisory lock, so several
// nodes may call it at start-up at once.
func (s *Store) Migrate(ctx context.Context) error { return s.s.Migrate(ctx) }

// MigrationSQL returns the statements [Store.Migrate] runs, for migration
// tools. They are idempotent (IF NOT EXISTS).
func (s *Store) MigrationSQL() []string { return s.s.MigrationSQL() }

// Scope returns a view of the same table in which keys live in the scope
// name. It implements [keystore.Scoper].
func (s *Store) Scope(name string) (keystore.Store, error) {
	v, err := s.s.Scope(name)
	if err != nil {
		return nil, err
	}
	return &Store{s: v}, nil
}

// Close releases the prepared statements of the store and of its scoped
// views; later calls return keystore.ErrClosed. It does not close the
// *sql.DB, which the caller owns.
func (s *Store) Close() error { return s.s.Close() }

// MaxResultSize returns the largest result Complete accepts.
func (s *Store) MaxResultSize() int { return s.s.MaxResultSize() }

// Reserve implements [keystore.Store.Reserve] in one statement: an INSERT
// … ON CONFLICT DO UPDATE that takes the key only when it is absent or
// expired by now(), with a nextval() token, and otherwise reads the live
// row. Atomic: if the process or the connection dies, the row was either
// written whole or not at all.
func (s *Store) Reserve(ctx context.Context, key string, fp []byte, lease time.Duration) (keystore.Claim, error) {
	return s.s.Reserve(ctx, key, fp, lease)
}

// Complete implements [keystore.Store.Complete] with one conditional
// UPDATE (token and state must match); the TTL runs from now() at
// completion. If the connection drops while the UPDATE commits, the caller
// gets an error but the result may be stored; Complete again with the same
// claim to find out (it returns nil if it was).
func (s *Store) Complete(ctx context.Context, c keystore.Claim, result []byte, ttl time.Duration) error {
	return s.s.Complete(ctx, c, result, ttl)
}

// Release implements [keystore.Store.Release] with one conditional DELETE.
func (s *Store) Release(ctx context.Context, c keystore.Claim) error {
	return s.s.Release(ctx, c)
}

// Sweep deletes expired results and expired leases, batch rows per DELETE,
// through the expiry index, until none are left. Rows are picked with FOR
// UPDATE SKIP LOCKED, so it is safe and efficient on several nodes at once.
// It implements [keystore.Sweeper].
func (s *Store) Sweep(ctx context.Context, batch int) (int, error) { return s.s.Sweep(ctx, batch) }
