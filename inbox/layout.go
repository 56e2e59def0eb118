package inbox

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/idem-go/idem/inbox/internal/engine"
	"github.com/idem-go/idem/inbox/internal/engine/bucket"
	"github.com/idem-go/idem/inbox/internal/engine/bucketmysql"
	"github.com/idem-go/idem/inbox/internal/engine/bucketsql"
	"github.com/idem-go/idem/internal/ddl"
	"github.com/idem-go/idem/sqldialect"
)

// Layout is how the key table stores keys.
type Layout int

const (
	// LayoutBuckets (the default for new tables)
	// stores a 16-byte keyed digest of (consumer, key) in one table per
	// time bucket of first arrival, <table>_k<unix start>, keyed by the
	// digest alone, and retires keys by dropping whole buckets. A key is
	// looked up in every live bucket, so a duplicate that arrives buckets
	// after its first delivery is still found. See docs/inbox.md, "At
	// scale".
	LayoutBuckets Layout = iota + 1
	// LayoutRows is the layout of releases before issue 14: one table of
	// (consumer, idem_key, fingerprint, processed_at) rows, retired by
	// Sweep's row deletes. Tables made by earlier releases keep it until
	// [Inbox.MigrateLayout].
	LayoutRows
)

func (l Layout) String() string {
	switch l {
	case LayoutBuckets:
		return "buckets"
	case LayoutRows:
		return "rows"
	}
	return "Layout(" + strconv.Itoa(int(l)) + ")"
}

// defaultWidth is the bucket width of a new table: a quarter of the
// retention (or horizon), so that about six buckets are live (each new key
// is looked up in every one: the scale curve in docs/inbox.md measures
// that cost against the bucket count) and a key outlives its retention by
// at most a quarter; at least a minute.
func defaultWidth(c config) time.Duration {
	r := max(c.retention, c.horizon)
	if r <= 0 {
		return 24 * time.Hour
	}
	w := (r / 4).Truncate(time.Second)
	return max(w, time.Minute)
}

// MigrateLayout moves a table of the rows layout (made by a release before
// issue 14) to the bucketed layout, with deliveries running and without a
// window in which a duplicate can be applied:
//
//  1. In one transaction it creates the meta table and a BEFORE INSERT
//     trigger on the rows table that refuses every insert. The trigger
//     waits for transactions that are inserting into the rows table (its
//     lock conflicts with theirs), so every key recorded there is
//     committed before the first key is recorded in a bucket.
//  2. From then on, Inbox values of this release record keys in buckets
//     and look every key up in the rows table too (dual read); one that
//     still had the rows layout cached gets the trigger's refusal, reads
//     the new layout and reruns the transaction. An Inbox of an earlier
//     release gets the refusal as an error: its message is not
//     acknowledged and is redelivered (and its Verify refuses the frozen
//     table from then on).
//  3. [Inbox.Sweep] drops the rows table once the migration is older than
//     the sweep's age (which the recorded horizon bounds), with the
//     buckets that expired.
//
// If the process dies before step 1 commits, nothing changed; after, the
// migration is complete. Calling it on a table already migrated, or on a
// new table, does nothing.
func (in *Inbox) MigrateLayout(ctx context.Context) error {
	t := in.cfg.table
	err := in.withRetry(ctx, func() error {
		tx, err := in.db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("inbox: migrate layout: begin: %w", err)
		}
		defer tx.Rollback()
		if err := ddl.Lock(ctx, tx, in.dialect, t); err != nil {
			return fmt.Errorf("inbox: migrate layout: %w", err)
		}
		rows, err := engine.TableExists(ctx, tx, in.dialect, t)
		if err != nil {
			return fmt.Errorf("inbox: migrate layout: %w", err)
		}
		meta, err := engine.TableExists(ctx, tx, in.dialect, bucket.MetaName(t))
		if err != nil {
			return fmt.Errorf("inbox: migrate layout: %w", err)
		}
		if meta || !rows {
			return nil
		}
		if in.dialect == sqldialect.MySQL {
			return bucketmysql.Freeze(ctx, tx, in.h)
		}
		return bucketsql.Freeze(ctx, tx, in.h)
	})
	if err != nil {
		return err
	}
	in.isReady.Store(false)
	return in.prepare(ctx, in.withRetry)
}
