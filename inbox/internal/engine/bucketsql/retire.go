package bucketsql

import (
	"context"
	"fmt"
	"time"

	"github.com/idem-go/idem/inbox/internal/engine/bucket"
	"github.com/idem-go/idem/sqldialect"
)

// retire is Sweep for the bucketed layout: in one transaction that
// reads the largest horizon recorded by any consumer of the table (a
// bucket holds every consumer's keys), it drops each bucket whose newest
// key is older than olderThan by the database's clock, and the frozen rows
// table once the migration is that old. It returns the number of tables
// dropped.
func (e *Engine) retire(ctx context.Context, olderThan time.Duration) (int, error) {
	b := e.b
	var dropped int
	err := e.h.Retry(ctx, func() error {
		dropped = 0
		tx, err := e.h.DB.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("inbox: sweep: begin: %w", err)
		}
		defer tx.Rollback()
		if e.b.D == sqldialect.Postgres {
			// A DROP waits for the transactions that read the bucket (a
			// delivery whose handler runs long), and while it waits every
			// delivery, which reads every live bucket, queues behind it:
			// bound the wait; the next Sweep tries again.
			if _, err := tx.ExecContext(ctx, fmt.Sprintf(`SET LOCAL lock_timeout = '%ds'`, bucket.DropLockWait)); err != nil {
				return fmt.Errorf("inbox: sweep: %w", err)
			}
		}
		expired, limit, err := b.Expired(ctx, tx, olderThan)
		if err != nil {
			return err
		}
		for _, s := range expired {
			if _, err := tx.ExecContext(ctx, `DROP TABLE IF EXISTS `+bucket.Name(e.b.Table, s)); err != nil {
				return fmt.Errorf("inbox: sweep: drop %s (a transaction held it for %d s; the next sweep tries again): %w", bucket.Name(e.b.Table, s), bucket.DropLockWait, err)
			}
			if err := e.runs.Drop(ctx, tx, s); err != nil {
				return fmt.Errorf("inbox: sweep: drop the runs of %s: %w", bucket.Name(e.b.Table, s), err)
			}
			dropped++
		}
		if old, err := b.LegacyExpired(ctx, tx, limit); err != nil {
			return err
		} else if old {
			if _, err := tx.ExecContext(ctx, `DROP TABLE IF EXISTS `+e.b.Table); err != nil {
				return fmt.Errorf("inbox: sweep: drop the migrated rows table: %w", err)
			}
			dropped++
		}
		return tx.Commit()
	})
	if err != nil {
		return 0, err
	}
	if dropped > 0 {
		// Other Inbox values find out from their next statement's error.
		e.h.Unready()
	}
	return dropped, nil
}
