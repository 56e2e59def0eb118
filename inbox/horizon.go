package inbox

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/inbox/internal/engine"
	"github.com/idem-go/idem/inbox/internal/engine/bucket"
)

// The redelivery horizon is a property of the stored data, not of one Inbox
// value: an Inbox built with [WithRedeliveryHorizon] records it, per
// consumer, in the table next to the key table (SchemaSQL creates it; its
// name is the key table's plus "_horizon"), and every Sweep reads it there.
// An Inbox of the same consumer built without the option, in another
// process or by another team, therefore cannot sweep keys younger than the
// horizon by omission. The recorded value only grows, unless lowered with
// [Inbox.LowerRedeliveryHorizon].

// ready runs, once per Inbox, what must precede the first use of the table:
// Verify, then recording this Inbox's horizon. A failure is returned and
// tried again by the next call; a success is never repeated, so the hot
// path pays one atomic load. Its steps are retried as a transaction is
// (in.withRetry).
func (in *Inbox) ready(ctx context.Context) error { return in.readyWith(ctx, in.withRetry) }

// tryFunc runs f: in.withRetry retries it, once runs it once.
type tryFunc func(ctx context.Context, f func() error) error

// once runs f once: the try of a step inside an attempt that a caller's
// in.withRetry reruns, so that the attempt's reruns are the whole budget.
func once(_ context.Context, f func() error) error { return f() }

// readyWith is ready with its steps tried by try. Inside a transaction's
// attempt it is once: after a migration marked the Inbox unready, each
// rerun of a delivery verifies the table again in one try, instead of
// with a budget of reruns of its own inside each of the delivery's, which
// squared the budget: by default 121 verifications and their back-offs,
// instead of 11, for a delivery into a table being migrated.
func (in *Inbox) readyWith(ctx context.Context, try tryFunc) error {
	if in.isReady.Load() {
		return nil
	}
	in.readyMu.Lock()
	defer in.readyMu.Unlock()
	if in.isReady.Load() {
		return nil
	}
	// A busy database (SQLITE_BUSY, a deadlock) is retried as a
	// transaction is; an unsafe or missing table is not.
	var e engine.Engine
	var b *bucket.State
	if err := try(ctx, func() (err error) {
		e, b, err = in.verify(ctx)
		return err
	}); err != nil {
		return err
	}
	in.eng.Store(&engineRef{e})
	if b != nil {
		if err := try(ctx, func() error {
			return in.h.ReadOnlyTx(ctx, func(tx *sql.Tx) error { return b.SyncClock(ctx, tx) })
		}); err != nil {
			return fmt.Errorf("inbox: read the database clock: %w", err)
		}
	}
	if in.cfg.horizon > 0 {
		if err := in.writeHorizon(ctx, try, in.h.Horizon.Raise, in.cfg.horizon); err != nil {
			return err
		}
	}
	in.isReady.Store(true)
	return nil
}

func (in *Inbox) writeHorizon(ctx context.Context, try tryFunc, stmt string, d time.Duration) error {
	return try(ctx, func() error {
		tx, err := in.db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("inbox: record redelivery horizon: begin: %w", err)
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, stmt, in.consumer, d.Microseconds()); err != nil {
			return fmt.Errorf("inbox: record redelivery horizon in %s (apply SchemaSQL or call Migrate): %w", in.h.Horizon.Table, err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("inbox: record redelivery horizon: commit: %w", err)
		}
		return nil
	})
}

// prepare is what every transaction attempt runs first: ready (again, if a
// migration reset it) and, in the bucketed layout, the current and next
// bucket tables. try tries ready's steps: once inside an attempt.
func (in *Inbox) prepare(ctx context.Context, try tryFunc) error {
	if err := in.readyWith(ctx, try); err != nil {
		return err
	}
	return in.engine().Prepare(ctx)
}

// readTx runs f in a short transaction of its own.
func (in *Inbox) readTx(ctx context.Context, f func(tx *sql.Tx) error) error {
	return in.h.ReadTx(ctx, f)
}

// LowerRedeliveryHorizon sets the consumer's recorded redelivery horizon to
// d, even when a larger one is recorded; d == 0 removes the guard. It is the
// only way to lower the horizon that Sweep enforces for every Inbox of this
// consumer: do it when the broker's retention or the clients' retry window
// really shrank. An Inbox still configured with a larger
// [WithRedeliveryHorizon] raises it again the first time it is used, so
// change the option in every process first.
//
// It is one short transaction: if the process dies before it commits, the
// old horizon stays.
func (in *Inbox) LowerRedeliveryHorizon(ctx context.Context, d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("inbox: redelivery horizon %v must not be negative: %w", d, idem.ErrInvalidArgument)
	}
	if in.cfg.horizon > d {
		return fmt.Errorf("inbox: this Inbox is configured with a redelivery horizon of %v; lower the option first: %w", in.cfg.horizon, idem.ErrInvalidArgument)
	}
	if err := in.ready(ctx); err != nil {
		return err
	}
	return in.writeHorizon(ctx, in.withRetry, in.h.Horizon.Set, d)
}
