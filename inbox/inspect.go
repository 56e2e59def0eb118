package inbox

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/inbox/internal/engine"
)

// ErrNotRecorded is returned by [Inbox.Inspect] and [Inbox.Forget] when the
// key is not recorded for the consumer (never processed, retired by Sweep,
// or already forgotten).
var ErrNotRecorded = engine.ErrNotRecorded

// Record is what the key table knows of one recorded key.
type Record struct {
	Consumer string
	Key      string
	Layout   Layout
	// Table is the table that holds the key: the rows table, a bucket
	// table (<table>_k<start>), or on SQLite one of a bucket's immutable
	// runs (<table>_k<start>_r…), in which case Run is true.
	Table string
	Run   bool
	// RecordedAt is when the key was recorded (the database's clock); the
	// rows layout only. Zero in the bucketed layout, which stores no time.
	RecordedAt time.Time
	// Bucket is the start of the time bucket that holds the key, and
	// BucketWidth its width (bucketed layout; zero otherwise). The key
	// was recorded before Bucket+BucketWidth, and is retired with the
	// whole bucket.
	Bucket      time.Time
	BucketWidth time.Duration
	// Fingerprint is the payload fingerprint recorded with the key; nil
	// when it was recorded without one.
	Fingerprint []byte
}

// Inspect returns what the key table holds for key under consumer (which
// may differ from the Inbox's own consumer), or an error wrapping
// [ErrNotRecorded]. It reads only, in a transaction of its own.
func (in *Inbox) Inspect(ctx context.Context, consumer, key string) (Record, error) {
	var rec Record
	err := in.keyTx(ctx, consumer, key, func(tx *sql.Tx) (func(), error) {
		var err error
		rec, err = in.find(ctx, tx, consumer, key)
		return nil, err
	})
	return rec, err
}

// Forget deletes the record of key under consumer, so that the next
// delivery of that key runs its handler again: an operator's deliberate
// re-run of one message. The effect is applied again by that delivery;
// Forget does not undo it. A key that is not recorded returns an error
// wrapping [ErrNotRecorded] and changes nothing.
//
// Forget is exact on every layout. It runs in one transaction that, on
// PostgreSQL's bucketed layout, takes the key's lock that Process takes, and
// on SQLite holds the write lock; a delivery of the key racing with it is
// either a duplicate (it ran first) or applies once after it. A lookup
// filter that still holds the key only makes the next delivery look it up
// exactly. On SQLite a key in an immutable run is deleted from the run,
// which is renamed for its new key count in the same transaction.
func (in *Inbox) Forget(ctx context.Context, consumer, key string) error {
	return in.keyTx(ctx, consumer, key, func(tx *sql.Tx) (func(), error) {
		return in.forgetTx(ctx, tx, consumer, key)
	})
}

// keyTx checks (consumer, key) and runs f in a transaction, retried like
// Process's, committed when f succeeds; then f's after (if any) runs.
func (in *Inbox) keyTx(ctx context.Context, consumer, key string, f func(tx *sql.Tx) (after func(), err error)) error {
	if err := idem.ValidateKey(consumer); err != nil {
		return fmt.Errorf("inbox: consumer name: %w", err)
	}
	if err := idem.ValidateKey(key); err != nil {
		return fmt.Errorf("inbox: %w", err)
	}
	return in.withRetry(ctx, func() error {
		tx, err := in.begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		after, err := f(tx)
		if err != nil {
			return err
		}
		if err := in.commit(ctx, tx, key); err != nil {
			return err
		}
		if after != nil {
			after()
		}
		return nil
	})
}

// find looks the key up in every table that may hold it.
func (in *Inbox) find(ctx context.Context, tx *sql.Tx, consumer, key string) (Record, error) {
	r, err := in.engine().Find(ctx, tx, consumer, key)
	return Record{
		Consumer: r.Consumer, Key: r.Key, Layout: Layout(r.Layout), Table: r.Table, Run: r.Run,
		RecordedAt: r.RecordedAt, Bucket: r.Bucket, BucketWidth: r.BucketWidth, Fingerprint: r.Fingerprint,
	}, err
}

// forgetTx deletes the key from the table find reports, after taking the
// locks a concurrent Process of the key takes.
func (in *Inbox) forgetTx(ctx context.Context, tx *sql.Tx, consumer, key string) (func(), error) {
	return in.engine().Forget(ctx, tx, consumer, key)
}
