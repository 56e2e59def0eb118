package inbox

import (
	"context"
	"fmt"
	"time"

	"github.com/idem-go/idem"
)

// MaxSweepBatch bounds the rows one Sweep statement deletes.
const MaxSweepBatch = 100_000

// Sweep deletes this consumer's keys recorded more than olderThan ago, at
// most batch rows per statement, until a statement deletes fewer than batch
// rows or ctx ends. Each statement is its own short transaction that walks
// the (consumer, processed_at) index, so Sweep never holds locks on the whole
// table. Several nodes may sweep at once: on PostgreSQL rows another sweeper
// holds are skipped (FOR UPDATE SKIP LOCKED); elsewhere a lock conflict is
// retried.
//
// Age is measured by the database's clock. olderThan must be at least the
// redelivery horizon ([ErrHorizon] otherwise): this Inbox's
// [WithRedeliveryHorizon], and the largest horizon any Inbox of this
// consumer recorded in the horizon table, which every Sweep reads, so an
// Inbox built without the option cannot sweep below it. A key swept while a
// duplicate can still arrive lets that duplicate apply again. Sweep fails
// (and deletes nothing) when the horizon table is missing: apply SchemaSQL.
//
// On the bucketed layout (see [LayoutBuckets]) Sweep deletes no rows: it
// drops, in one transaction, every bucket table whose newest key is older
// than olderThan, and deleted counts the tables dropped, not keys. Its
// cost is a catalog change per bucket, whatever the bucket holds; batch is
// not used. On PostgreSQL it then packs, once, each bucket sealed for a
// width: one rebuild of its primary-key index, full, without blocking
// writers (see [WithBucketPacking]). Buckets hold the keys of every consumer of the table, so the
// largest horizon any consumer recorded binds it.
//
// If the process dies during Sweep, the batches already deleted stay deleted
// and the rest are deleted by the next Sweep; no key younger than olderThan is
// ever touched.
func (in *Inbox) Sweep(ctx context.Context, olderThan time.Duration, batch int) (deleted int, err error) {
	if olderThan <= 0 {
		return 0, fmt.Errorf("inbox: sweep age %v must be positive: %w", olderThan, idem.ErrInvalidArgument)
	}
	if batch <= 0 || batch > MaxSweepBatch {
		return 0, fmt.Errorf("inbox: sweep batch %d must be 1 to %d: %w", batch, MaxSweepBatch, idem.ErrInvalidArgument)
	}
	if in.cfg.horizon > 0 && olderThan < in.cfg.horizon {
		return 0, fmt.Errorf("inbox: asked to delete keys older than %v, horizon is %v: %w", olderThan, in.cfg.horizon, ErrHorizon)
	}
	if err := in.ready(ctx); err != nil {
		return 0, err
	}
	return in.engine().Sweep(ctx, olderThan, batch)
}

// SweepExpired is Sweep with the retention set by [WithRetention].
func (in *Inbox) SweepExpired(ctx context.Context, batch int) (int, error) {
	if in.cfg.retention <= 0 {
		return 0, fmt.Errorf("inbox: SweepExpired needs WithRetention: %w", idem.ErrInvalidArgument)
	}
	return in.Sweep(ctx, in.cfg.retention, batch)
}

// RunSweeper calls SweepExpired every interval until ctx ends, and returns
// ctx's error. The caller owns the goroutine it runs in. A failed sweep is
// logged and tried again at the next tick; keys are only ever kept longer.
func (in *Inbox) RunSweeper(ctx context.Context, interval time.Duration, batch int) error {
	if interval <= 0 {
		return fmt.Errorf("inbox: sweep interval %v must be positive: %w", interval, idem.ErrInvalidArgument)
	}
	if _, err := in.SweepExpired(ctx, batch); err != nil && ctx.Err() == nil {
		in.cfg.logger.WarnContext(ctx, "inbox: sweep failed", "consumer", in.consumer, "err", err)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			if _, err := in.SweepExpired(ctx, batch); err != nil && ctx.Err() == nil {
				in.cfg.logger.WarnContext(ctx, "inbox: sweep failed", "consumer", in.consumer, "err", err)
			}
		}
	}
}
