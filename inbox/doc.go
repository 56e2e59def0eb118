// Package inbox is the transactional inbox: an idempotent consumer whose
// dedup record and business effect commit in one database transaction.
//
// For each delivery, [Inbox.Process] begins a transaction and inserts the
// key (the rows layout of earlier releases is described here; the bucketed
// layout of new tables records a digest, see [LayoutBuckets]): PostgreSQL
// and SQLite with INSERT ... ON CONFLICT
// (consumer, idem_key) DO NOTHING and the affected-row count (one row: new;
// zero: recorded); MySQL with a plain INSERT, whose duplicate-key error 1062
// means "recorded" (MySQL rolls back that statement only, not the
// transaction), so that the outcome never depends on the DSN's
// clientFoundRows. A new key runs fn in the same transaction, and both
// commit together; a recorded key is not run, and Process reports applied
// == false. Duplicates are recognised by error code, never by error text.
//
//	applied, err := in.Process(ctx, msg.ID, func(ctx context.Context, tx *sql.Tx) error {
//		_, err := tx.ExecContext(ctx, "UPDATE wallets SET balance = balance + $1 WHERE user_id = $2", 50, 42)
//		return err
//	})
//	if err != nil {
//		return err // do not ack: the broker redelivers and Process runs again
//	}
//	ack(msg) // applied or duplicate: both are done
//
// # What happens if the process dies
//
//   - Before COMMIT (in fn, or between the insert and the commit): the
//     database rolls the transaction back. Neither the key nor the effect is
//     recorded; the broker redelivers and the message is processed.
//   - During COMMIT: the outcome is unknown to the caller, so Process returns
//     an error and the caller must not ack. The redelivery either finds the key
//     (the commit landed: applied == false) or processes the message.
//   - After COMMIT, before the ack: the redelivery finds the key and is
//     reported as a duplicate; the effect is not repeated.
//
// # Concurrency
//
// Concurrent deliveries of one key, from goroutines or from separate
// processes, apply exactly once: the second insert waits on the unique index
// until the first transaction ends, then sees the row (duplicate) or, if the
// first rolled back, inserts it and applies. Serialization failures,
// deadlocks and SQLITE_BUSY are retried with bounded, jittered backoff; fn runs
// again inside a fresh transaction, so fn must do all its work through tx (or
// be safe to repeat).
//
// # Batches
//
// [Inbox.ProcessBatch] runs many messages in one transaction (one commit, one
// fsync) with a handler per message, and records all keys with one multi-row
// insert. Its cost is still one round trip per message: the handler's
// statements. [Inbox.ProcessBatchSet] removes that too: its handler receives
// all the batch's new messages at once and applies them with set-based
// statements, so a batch of 100 costs about what one [Inbox.Process] costs.
// Either way a failing message can be isolated: ProcessBatch reruns the
// batch with a savepoint per message, and ProcessBatchSet does the same when
// given a per-message handler to fall back on.
//
// # Retention
//
// Keys grow without bound unless swept. New tables have the bucketed layout ([LayoutBuckets]): a 16-byte keyed digest per
// key, in one table per time bucket of first arrival, looked up in every
// live bucket; [Inbox.Sweep] drops whole buckets, whatever they hold. On
// the rows layout of earlier releases, Sweep deletes rows older
// than a retention in bounded batches along the (consumer, processed_at)
// index; [Inbox.MigrateLayout] moves such a table to buckets with
// deliveries running. The retention must be at least the duplicate horizon: the broker's
// retention or redelivery window plus the client retry horizon. A consumer
// group that can be reset 7 days back on a topic with 7 days of retention
// needs at least 7 days; a shorter retention lets late duplicates through as
// fresh messages. [WithRedeliveryHorizon] makes New and Sweep refuse a
// shorter retention.
//
// The horizon is a property of the stored data: an Inbox with the option
// records it in the horizon table, and every Sweep of the consumer, from
// any Inbox, obeys the largest one recorded; only
// [Inbox.LowerRedeliveryHorizon] lowers it.
//
// # The key table is verified
//
// The schema is in [Inbox.SchemaSQL] for migration tools; [Inbox.Migrate]
// applies it. Either way, before its first use each Inbox runs
// [Inbox.Verify] once: the table must have a unique index or primary key on
// exactly (consumer, idem_key), comparing bytes, and nothing that could
// drop or rewrite a key's insert. A table that cannot dedupe (a wider
// primary key, say, as a partitioned table needs) is refused with
// [ErrUnsafeTable] instead of applying every redelivery again. In the
// bucketed layout each bucket table must have exactly one unique index,
// its primary key on the digest, and no trigger; a rows table beside it
// must be frozen by MigrateLayout.
package inbox
