package engine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idem-go/idem/sqldialect"
)

// Engine stores one table's keys for one consumer. Its methods that take a
// transaction run inside it and never commit it; the inbox commits.
type Engine interface {
	// Layout is the layout of the table the engine serves.
	Layout() Layout
	// Prepare runs before each transaction that records or reads keys,
	// outside it: whatever the next transaction's statements need (the
	// bucket tables of now, a fresh bucket list, a flushed run).
	Prepare(ctx context.Context) error
	// Record records the keys of msgs[idx...] unless present and returns
	// those it recorded. The rows engine on MySQL returns ErrSlowPath
	// when any key was present (its insert cannot say which).
	Record(ctx context.Context, tx *sql.Tx, msgs []Message, idx []int) (map[string]bool, error)
	// RecordOne records m's key unless present and reports whether it
	// did.
	RecordOne(ctx context.Context, tx *sql.Tx, m Message) (bool, error)
	// Fingerprint returns the fingerprint recorded with m's key; nil
	// when there is none.
	Fingerprint(ctx context.Context, tx *sql.Tx, m Message) ([]byte, error)
	// Find returns what the table holds for key under consumer, or an
	// error wrapping ErrNotRecorded.
	Find(ctx context.Context, tx *sql.Tx, consumer, key string) (Record, error)
	// Forget deletes the record of key under consumer, after taking the
	// locks a concurrent delivery of it takes; the func returned, if not nil,
	// runs once tx committed.
	Forget(ctx context.Context, tx *sql.Tx, consumer, key string) (func(), error)
	// Sweep retires keys older than olderThan (by the database's clock),
	// after checking olderThan against the recorded horizons, and
	// returns how many rows (rows layout) or tables (bucketed layout) it
	// deleted.
	Sweep(ctx context.Context, olderThan time.Duration, batch int) (int, error)
	// Stale reports, after a *StaleError, whether the tables changed
	// since the failed statement was built, so that a rerun may pass. It
	// runs outside any transaction.
	Stale(ctx context.Context) bool
}

// Message is what an engine needs of one delivery.
type Message struct {
	Key         string
	Fingerprint []byte
}

// Layout is how the key table stores keys (the inbox's Layout: the values
// are the same).
type Layout int

// The layouts.
const (
	LayoutBuckets Layout = iota + 1
	LayoutRows
)

// Record is what the key table knows of one recorded key (the inbox's
// Record, field for field).
type Record struct {
	Consumer, Key string
	Layout        Layout
	Table         string
	Run           bool
	RecordedAt    time.Time
	Bucket        time.Time
	BucketWidth   time.Duration
	Fingerprint   []byte
}

// The inbox's sentinels, declared here so that engines wrap them; package
// inbox exports the same values.
var (
	ErrUnsafeTable = errors.New("inbox: key table cannot dedupe")
	ErrNotMigrated = errors.New("inbox: not migrated")
	ErrNotRecorded = errors.New("inbox: key not recorded")
	ErrHorizon     = errors.New("inbox: retention shorter than the redelivery horizon")
)

// ErrBucketsChanged: a bucket table the statement named was dropped, or a
// new one appeared; the transaction is rerun with the fresh list.
var ErrBucketsChanged = errors.New("inbox: bucket tables changed; retrying")

// ErrCatalogChanging: on MySQL, a bucket table was still being created or
// dropped through every read of the catalog a list allows (see the
// bucket package's List); nothing was read or written, and the
// transaction is rerun, after its back-off, to read the catalog again.
var ErrCatalogChanging = errors.New("the bucket tables kept changing; try again")

// ErrLayoutChanged: the rows table refused the insert because it was
// migrated to the bucketed layout; the transaction is rerun on it.
var ErrLayoutChanged = errors.New("inbox: key table was migrated to the bucketed layout; retrying")

// ErrSlowPath asks a batch to be redone with a savepoint per message.
var ErrSlowPath = errors.New("inbox: batch needs the per-message path")

// StaleError is a bucket statement's failure that a fresh bucket list may
// cure (see Engine.Stale).
type StaleError struct{ Err error }

func (e *StaleError) Error() string { return "inbox: record keys: " + e.Err.Error() }
func (e *StaleError) Unwrap() error { return e.Err }

// MissingTable reports whether a bucket statement failed because a table
// it names does not exist: a bucket another process dropped after this
// Inbox listed it. Such a statement is rerun even when the bucket list
// read after it equals the cached one: another goroutine of the same
// Inbox may have read the fresh list first.
func (e *StaleError) MissingTable(d sqldialect.Dialect) bool {
	switch d {
	case sqldialect.Postgres:
		var pe interface{ SQLState() string }
		return errors.As(e.Err, &pe) && pe.SQLState() == "42P01"
	case sqldialect.MySQL:
		return sqldialect.MySQLErrorNumber(e.Err) == 1146
	case sqldialect.SQLite:
		return strings.Contains(e.Err.Error(), "no such table")
	}
	return false
}

// NotRecorded is the error of a key that no table holds.
func NotRecorded(consumer, key string) error {
	return fmt.Errorf("inbox: key %q of consumer %q: %w", key, consumer, ErrNotRecorded)
}

// NullBytes is b, or NULL when empty.
func NullBytes(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return b
}

// StatementError marks the failure of a statement that names tables which
// may have changed (a bucket another process dropped, the migrated rows
// table): a *StaleError, on which the retry loop asks Engine.Stale,
// unless the failure is retryable anyway or ctx ended.
func StatementError(ctx context.Context, d interface{ Retryable(error) bool }, err error) error {
	if d.Retryable(err) || ctx.Err() != nil {
		return fmt.Errorf("inbox: record keys: %w", err)
	}
	return &StaleError{err}
}
