package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/inbox/internal/engine"
	"github.com/idem-go/idem/inbox/internal/engine/bucket"
	"github.com/idem-go/idem/inbox/internal/engine/rows"
	"github.com/idem-go/idem/internal/ddl"
	"github.com/idem-go/idem/internal/option"
	"github.com/idem-go/idem/sqldialect"
)

// ErrHorizon is returned by Sweep when asked to delete keys younger than
// the configured redelivery horizon. The inbox's other errors wrap the
// sentinels of package idem: [idem.ErrInvalidKey] (a key, or New's consumer
// name, that breaks [idem.ValidateKey]; returned before any I/O, so
// dead-letter such a message), [idem.ErrInvalidArgument] (a nil handler, a
// fingerprint over [idem.MaxFingerprintLen] bytes, a non-positive batch
// size), [idem.ErrInvalidOption] (New's options) and
// [idem.ErrFingerprintMismatch] (the key is recorded with another
// fingerprint; nothing was applied).
var ErrHorizon = engine.ErrHorizon

// Beginner starts transactions. *sql.DB and *sql.Conn implement it.
type Beginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// Handler applies one message's effect inside tx. It must do all its
// database work through tx: the key is recorded in the same transaction, and
// a retry after a serialization failure runs the handler again in a new one.
type Handler func(ctx context.Context, tx *sql.Tx) error

// Inbox records processed keys for one consumer in one table. It is safe for
// concurrent use and starts no goroutines. On SQLite and MySQL it prepares
// its statements on the database's connections: [Inbox.Close] releases them
// when the Inbox is no longer needed (the *sql.DB's own Close does too).
type Inbox struct {
	db       Beginner
	dialect  sqldialect.Dialect
	consumer string
	cfg      config
	// h is what the storage engines are given (package engine).
	h *engine.Host
	// schema is SchemaSQL's; rowsSchema creates the rows layout's tables
	// (the key table and the horizon table).
	schema, rowsSchema []string
	rows               *rows.Engine

	readyMu sync.Mutex  // serialises the first use (see ready)
	isReady atomic.Bool // Verify passed and the horizon is recorded
	// eng is the engine of the table's layout, once ready found it.
	eng atomic.Pointer[engineRef]
}

// engineRef holds an engine.Engine for an atomic.Pointer.
type engineRef struct{ engine.Engine }

// engine is the table's engine; ready must have passed.
func (in *Inbox) engine() engine.Engine { return in.eng.Load().Engine }

// New returns an Inbox for consumer on db. The consumer name scopes keys:
// the same key under two consumers is two keys; it obeys the key rule of
// [idem.ValidateKey] (an error wrapping [idem.ErrInvalidOption] and
// [idem.ErrInvalidKey] otherwise). New checks its arguments and options and
// touches no table; call [Inbox.Migrate] or apply [Inbox.SchemaSQL] with
// your migration tool. The first call that uses the table runs
// [Inbox.Verify] (and records the redelivery horizon, if set) once.
func New(db Beginner, d sqldialect.Dialect, consumer string, opts ...Option) (*Inbox, error) {
	if db == nil {
		return nil, invalid("nil database")
	}
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	if err := idem.ValidateKey(consumer); err != nil {
		// The consumer name is stored next to every key: the key rule
		// applies to it (PostgreSQL's text refuses NUL and invalid UTF-8).
		return nil, fmt.Errorf("inbox: consumer name: %w: %w", err, idem.ErrInvalidOption)
	}
	cfg := defaultConfig()
	if err := option.Apply("inbox", &cfg, opts); err != nil {
		return nil, err
	}
	if err := d.ValidateIdentifier(cfg.table); err != nil {
		return nil, invalid("table: %v", err)
	}
	if cfg.horizon > 0 && cfg.retention > 0 && cfg.retention < cfg.horizon {
		return nil, invalid("retention %v is shorter than the redelivery horizon %v: duplicates arriving in between would be applied again", cfg.retention, cfg.horizon)
	}
	if cfg.wait.Standbys > 0 && d != sqldialect.Postgres {
		return nil, invalid("WithWaitReplicas: %v has no standbys to wait for (PostgreSQL only)", d)
	}
	if cfg.layout == 0 {
		cfg.layout = LayoutBuckets
	}
	if cfg.width == 0 {
		cfg.width = defaultWidth(cfg)
	}
	in := &Inbox{db: db, dialect: d, consumer: consumer, cfg: cfg}
	in.h = &engine.Host{
		DB: db, D: d, Consumer: consumer, Table: cfg.table,
		KeyText: cfg.keyText, FilterBytes: cfg.filterBytes, NoPack: cfg.noPack, Width: cfg.width,
		Logger: cfg.logger, Stmts: engine.NewStmts(db, d), Horizon: engine.NewHorizon(d, cfg.table),
		Retry:   in.withRetry,
		Unready: func() { in.isReady.Store(false) },
		Swept: func(n int) {
			if in.cfg.hooks != nil {
				in.cfg.hooks.Swept(in.consumer, n)
			}
		},
	}
	in.rows = rows.New(in.h)
	in.rowsSchema = append(rows.Schema(d, cfg.table), in.h.Horizon.Schema)
	in.schema = in.rowsSchema
	if cfg.layout == LayoutBuckets {
		// A new table gets the meta table instead of the rows table.
		in.schema = []string{in.h.Horizon.Schema}
		in.schema = append(bucket.Schema(d, cfg.table, cfg.width), in.schema...)
	}
	return in, nil
}

// Consumer returns the consumer name that scopes this Inbox's keys.
func (in *Inbox) Consumer() string { return in.consumer }

// SchemaSQL returns the statements that create the key table and its index,
// for migration tools. They are idempotent (IF NOT EXISTS).
func (in *Inbox) SchemaSQL() []string { return append([]string(nil), in.schema...) }

// Migrate creates the key table, its index and the horizon table if they do
// not exist, then runs [Inbox.Verify] (an existing table is not trusted)
// and records the redelivery horizon if [WithRedeliveryHorizon] is set.
// Each step is idempotent: a crash midway is repaired by the next Migrate.
// Several processes may run it at once (the replicas of a service
// starting together): on PostgreSQL its statements run after a
// transaction-scoped advisory lock, so the others wait and then find the
// tables, instead of failing as the loser of two concurrent CREATE TABLE
// IF NOT EXISTS does.
//
// A table of the rows layout made by an earlier release is kept as it is
// (only the horizon table is added): moving it to buckets is
// [Inbox.MigrateLayout]'s job. A new table gets the layout of
// [WithLayout].
//
// On a MariaDB Galera cluster a new table must be of the rows layout
// ([WithLayout]([LayoutRows])): Migrate refuses to create a bucketed one,
// whose exactness across buckets rests on gap locks Galera does not
// replicate (an error wrapping [ErrUnsafeTable]).
//
// Migrate ends by checking how the database acknowledges commits relative
// to its standbys: see [WithReplicationCheck].
//
// A dialect that does not match the database (sqldialect.SQLite given a
// PostgreSQL pool) fails here with an error wrapping
// [sqldialect.ErrWrongDialect] that names the dialect to pass.
func (in *Inbox) Migrate(ctx context.Context) error {
	if err := in.refuseGalera(ctx); err != nil {
		return err
	}
	if err := in.createSchema(ctx); err != nil {
		if m := in.mismatch(ctx, err); m != nil {
			return m
		}
		return err
	}
	if err := in.ready(ctx); err != nil {
		return err
	}
	if err := in.engine().Prepare(ctx); err != nil {
		return err
	}
	in.checkReplication(ctx) // replication.go
	return nil
}

func (in *Inbox) createSchema(ctx context.Context) error {
	return in.withRetry(ctx, func() error {
		tx, err := in.db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("inbox: migrate: %w", err)
		}
		defer tx.Rollback()
		if err := ddl.Lock(ctx, tx, in.dialect, in.cfg.table); err != nil {
			return fmt.Errorf("inbox: migrate: %w", err)
		}
		schema := in.schema
		if in.cfg.layout == LayoutBuckets {
			rows, err := engine.TableExists(ctx, tx, in.dialect, in.cfg.table)
			if err != nil {
				return fmt.Errorf("inbox: migrate: %w", err)
			}
			meta, err := engine.TableExists(ctx, tx, in.dialect, bucket.MetaName(in.cfg.table))
			if err != nil {
				return fmt.Errorf("inbox: migrate: %w", err)
			}
			if rows && !meta {
				schema = in.rowsSchema // an earlier release's table: keep its layout
			}
		}
		return engine.ExecCommit(ctx, tx, "migrate", schema)
	})
}

// Process applies fn at most once for key. It begins a transaction, records
// the key unless it is already recorded, and runs fn in that transaction only
// if the key is new; then it commits both.
//
// Results:
//   - applied == true, err == nil: the key and fn's effect committed together.
//   - applied == false, err == nil: the key was already recorded (a
//     duplicate); fn did not run. Acknowledge the message.
//   - err != nil: nothing was recorded, or (if the error came from COMMIT)
//     the outcome is unknown. Do not acknowledge; the redelivery decides.
//
// An error from fn rolls the transaction back and is returned wrapped; the key
// is not recorded, so a redelivery runs fn again. Serialization failures,
// deadlocks and SQLITE_BUSY, from the insert or from fn, are retried in a new
// transaction (see [WithRetry]), and so is a COMMIT the database reports
// rolled back (MySQL 1213: Galera's certification failure). Cancelling ctx
// rolls back until COMMIT starts; a COMMIT in progress is not interrupted
// (on PostgreSQL a cancelled wait for a synchronous standby answers success
// for a commit the standby may not have), and Process returns when the
// database answers.
func (in *Inbox) Process(ctx context.Context, key string, fn Handler) (applied bool, err error) {
	return in.ProcessMessage(ctx, Message{Key: key}, fn)
}

// ProcessMessage is [Inbox.Process] with a payload fingerprint: when m's key
// is already recorded with a different non-empty fingerprint, it returns
// [idem.ErrFingerprintMismatch] and applies nothing. A key recorded without a
// fingerprint matches any.
func (in *Inbox) ProcessMessage(ctx context.Context, m Message, fn Handler) (applied bool, err error) {
	if err := in.checkMessage(m); err != nil {
		return false, err
	}
	if fn == nil {
		return false, fmt.Errorf("inbox: nil handler: %w", idem.ErrInvalidArgument)
	}
	ctx, sp := in.startSpan(ctx, idem.OpInboxProcess, m.Key)
	if err := in.ready(ctx); err != nil {
		if in.cfg.hooks != nil {
			in.cfg.hooks.Processed(in.consumer, false, err, 0)
		}
		sp.endProcess(false, err)
		return false, err
	}
	start := time.Now()
	err = in.withRetry(ctx, func() (err error) {
		sp.attempt()
		applied, err = in.processOnce(ctx, m, fn)
		return err
	})
	in.h.Stmts.PrepareMissed(ctx)
	if in.cfg.hooks != nil {
		in.cfg.hooks.Processed(in.consumer, applied, err, time.Since(start))
	}
	sp.endProcess(applied, err)
	return applied, err
}

func (in *Inbox) checkMessage(m Message) error {
	if err := idem.ValidateKey(m.Key); err != nil {
		return fmt.Errorf("inbox: %w", err)
	}
	if err := idem.ValidateFingerprint(m.Fingerprint); err != nil {
		return fmt.Errorf("inbox: %w", err)
	}
	return nil
}

// begin prepares the Inbox's statements and table state if it must, then
// begins a transaction. It runs inside an attempt of in.withRetry, which
// reruns what fails.
func (in *Inbox) begin(ctx context.Context) (*sql.Tx, error) {
	if err := in.prepare(ctx, once); err != nil {
		return nil, err
	}
	return in.beginDetached(ctx) // commit.go
}

func (in *Inbox) processOnce(ctx context.Context, m Message, fn Handler) (bool, error) {
	tx, err := in.begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback() // no-op after Commit
	inserted, err := in.insertOne(ctx, tx, m)
	if err != nil {
		return false, err
	}
	if !inserted {
		// Duplicate. Nothing to commit: the transaction only read.
		if err := in.checkFingerprint(ctx, tx, m); err != nil || in.cfg.wait.Standbys == 0 {
			return false, err
		}
		// With WithWaitReplicas the key found may be a commit the
		// standbys lack: wait for them as for a commit of our own.
		return false, in.commit(ctx, tx, m.Key)
	}
	if err := fn(ctx, tx); err != nil {
		return false, &HandlerError{Key: m.Key, Err: err}
	}
	if err := in.commit(ctx, tx, m.Key); err != nil {
		return false, err
	}
	return true, nil
}

// insertOne records m's key unless present and reports whether it did.
func (in *Inbox) insertOne(ctx context.Context, tx *sql.Tx, m Message) (bool, error) {
	return in.engine().RecordOne(ctx, tx, engine.Message{Key: m.Key, Fingerprint: m.Fingerprint})
}

// checkFingerprint compares m's fingerprint with the recorded one.
func (in *Inbox) checkFingerprint(ctx context.Context, tx *sql.Tx, m Message) error {
	if len(m.Fingerprint) == 0 {
		return nil
	}
	stored, err := in.engine().Fingerprint(ctx, tx, engine.Message{Key: m.Key, Fingerprint: m.Fingerprint})
	if err != nil {
		return err
	}
	return matchFingerprint(m, stored)
}

func matchFingerprint(m Message, stored []byte) error {
	if !idem.FingerprintsConflict(stored, m.Fingerprint) {
		return nil
	}
	return fmt.Errorf("inbox: key %q: %w", m.Key, idem.ErrFingerprintMismatch)
}

// withRetry runs f until it succeeds, fails with an error that is not
// retryable, or the retries are used up. Only errors whose transaction surely
// did not commit are retried.
func (in *Inbox) withRetry(ctx context.Context, f func() error) error {
	for attempt := 0; ; attempt++ {
		err := f()
		if err == nil || attempt >= in.cfg.maxRetries || !in.retryable(err) {
			return err
		}
		if in.cfg.hooks != nil {
			in.cfg.hooks.Retried(in.consumer, attempt+1, err)
		}
		in.cfg.logger.DebugContext(ctx, "inbox: retrying transaction", "consumer", in.consumer, "attempt", attempt+1, "err", err)
		if serr := in.cfg.backoff.Wait(ctx, attempt); serr != nil {
			return fmt.Errorf("inbox: retrying after %v: %w", err, serr)
		}
	}
}

func (in *Inbox) retryable(err error) bool {
	var ce *CommitError
	if errors.As(err, &ce) {
		return rolledBack(in.dialect, ce) // else the commit may have landed
	}
	if errors.Is(err, engine.ErrBucketsChanged) || errors.Is(err, engine.ErrLayoutChanged) || errors.Is(err, engine.ErrCatalogChanging) {
		return true // nothing committed; rerun on the fresh list, layout or catalog
	}
	var se *engine.StaleError
	if errors.As(err, &se) {
		r := in.eng.Load()
		// Stale reads the list again (so the rerun uses it) and reports
		// whether it changed; a missing table proves it did, though
		// another goroutine may have read the change first.
		return r != nil && (r.Stale(context.Background()) || se.MissingTable(in.dialect))
	}
	return in.dialect.Retryable(err)
}

// HandlerError is returned when the handler failed; nothing was recorded.
type HandlerError struct {
	Key string
	Err error
}

func (e *HandlerError) Error() string {
	return fmt.Sprintf("inbox: handler for key %q: %v", e.Key, e.Err)
}
func (e *HandlerError) Unwrap() error { return e.Err }

// CommitError is returned when COMMIT failed. The outcome is unknown: the
// commit may have landed before the connection broke. Do not acknowledge; a
// redelivery finds the key if it did.
type CommitError struct {
	Key string
	Err error
}

func (e *CommitError) Error() string {
	return fmt.Sprintf("inbox: commit for key %q (outcome unknown, do not ack): %v", e.Key, e.Err)
}
func (e *CommitError) Unwrap() error { return e.Err }

// Close releases the statements the Inbox prepared (SQLite and MySQL). It
// does not close the database. Using the Inbox after Close still works, with
// statements prepared again.
func (in *Inbox) Close() error { return in.h.Stmts.Close() }
