package engine

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"

	"github.com/idem-go/idem/sqldialect"
)

// Beginner starts transactions (the inbox's Beginner).
type Beginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// Host is what the inbox gives every engine: the database, the table, the
// options that concern storage, and the inbox's retry loop and hooks.
type Host struct {
	DB       Beginner
	D        sqldialect.Dialect
	Consumer string
	Table    string // the key table (rows layout), the prefix of buckets
	// KeyText keeps each key's text beside its digest (WithKeyText).
	KeyText bool
	// FilterBytes bounds the lookup filters' memory (0: none).
	FilterBytes int64
	// NoPack turns PostgreSQL's packing of sealed buckets off.
	NoPack bool
	// Width is the bucket width of a table the inbox creates.
	Width   time.Duration
	Logger  *slog.Logger
	Stmts   *Stmts // prepared statements (SQLite, MySQL); nil elsewhere
	Horizon Horizon
	// Retry runs f with the inbox's retry policy (WithRetry).
	Retry func(ctx context.Context, f func() error) error
	// Unready makes the inbox verify the table again before the next
	// transaction (a migration or a dropped table changed it).
	Unready func()
	// Swept reports a sweep's deletions to the inbox's hooks.
	Swept func(n int)
}

// ReadOnlyTx runs f, which only reads, in a short read-only transaction
// of its own. On SQLite that is a deferred transaction, which takes no
// write lock (the inbox's connections begin IMMEDIATE otherwise): a read
// of the catalog or the clock neither waits for the writers nor, past the
// busy timeout, fails because of them.
func (h *Host) ReadOnlyTx(ctx context.Context, f func(tx *sql.Tx) error) error {
	return h.tx(ctx, &sql.TxOptions{ReadOnly: true}, f)
}

// ReadTx runs f in a short transaction of its own.
func (h *Host) ReadTx(ctx context.Context, f func(tx *sql.Tx) error) error {
	return h.tx(ctx, nil, f)
}

func (h *Host) tx(ctx context.Context, opts *sql.TxOptions, f func(tx *sql.Tx) error) error {
	tx, err := h.DB.BeginTx(ctx, opts)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := f(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// ExecCommit runs stmts in tx and commits it; what names the step in
// errors.
func ExecCommit(ctx context.Context, tx *sql.Tx, what string, stmts []string) error {
	for _, s := range stmts {
		if _, err := tx.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("inbox: %s: %w", what, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("inbox: %s: commit: %w", what, err)
	}
	return nil
}
