package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/inbox/internal/engine"
)

// Message is one delivery for [Inbox.ProcessBatch] and
// [Inbox.ProcessMessage].
type Message struct {
	// Key identifies the message; required, 1 to 255 bytes.
	Key string
	// Fingerprint is an optional digest of the payload (at most 64 bytes).
	Fingerprint []byte
	// Value is carried to the batch handler untouched (the decoded payload,
	// the broker's record).
	Value any
}

// Result is the outcome of one message of a batch.
type Result struct {
	Key string
	// Applied is true when the message's key and effect committed.
	Applied bool
	// Err is non-nil when this message was not applied: its handler failed
	// (a *HandlerError; its key is not recorded, so a redelivery runs it
	// again) or its fingerprint did not match. The other messages are
	// unaffected.
	Err error
}

// BatchHandler applies one message of a batch inside tx.
type BatchHandler func(ctx context.Context, tx *sql.Tx, m Message) error

// SetHandler applies the effects of a batch's new messages together, inside
// tx, typically with set-based statements (one UPDATE for the whole batch).
// fresh holds, in batch order, exactly the messages whose keys this batch
// recorded: duplicates of keys recorded earlier, and repeats of a key within
// the batch, are left out. fresh is never empty. The handler must not retain
// fresh after it returns.
type SetHandler func(ctx context.Context, tx *sql.Tx, fresh []Message) error

// errSlowPath asks ProcessBatch to redo the batch with a savepoint per
// message.
var errSlowPath = engine.ErrSlowPath

// ProcessBatch processes msgs in one transaction, so that one commit (one
// fsync) is paid for the whole batch. Each message is applied at most once,
// exactly as by [Inbox.ProcessMessage], and a failing message rolls back
// alone: its key is not recorded, its Result carries the error, and the other
// messages commit.
//
// The fast path records every key with one multi-row insert and runs the
// handlers in the same transaction. If any handler fails (or, on MySQL's
// rows layout, any
// key is already present: the plain multi-row INSERT fails with 1062),
// that transaction is rolled back whole and the batch
// is run again with a savepoint around each message's key and effect, so a
// failed message's key is never committed without its effect. Handlers must
// therefore be safe to run again, as they must be for serialization retries:
// do all database work through tx.
//
// A key that appears twice in msgs is applied once, by its first occurrence
// that succeeds.
//
// A message whose key fails [idem.ValidateKey] (empty, over 255 bytes, not
// UTF-8, a NUL byte) or whose fingerprint is over 64 bytes fails alone,
// before any I/O: its Result.Err wraps [idem.ErrInvalidKey] or
// [ErrInvalidArgument], and the other messages are processed. Such a
// message can never succeed: dead-letter it.
//
// If ProcessBatch returns an error, nothing was committed (or, for a
// *CommitError, the outcome is unknown): acknowledge none of the messages.
// Otherwise acknowledge every message whose Result.Err is nil.
func (in *Inbox) ProcessBatch(ctx context.Context, msgs []Message, fn BatchHandler) ([]Result, error) {
	if fn == nil {
		return nil, fmt.Errorf("inbox: nil handler: %w", idem.ErrInvalidArgument)
	}
	return in.traceBatch(ctx, idem.OpInboxProcessBatch, msgs, nil, fn)
}

// ProcessBatchSet is [Inbox.ProcessBatch] for handlers that apply a whole
// batch at once. It records the keys of msgs with one multi-row insert and
// calls set once with the messages whose keys were new, in the same
// transaction, so a batch costs a fixed number of round trips (begin, insert,
// the handler's statements, commit) however many messages it holds. With
// one message per transaction that is the cost of [Inbox.Process]; with 100
// it is the cost of about one.
//
// When set fails, the transaction is rolled back whole: nothing of the batch
// is recorded or applied. If each is non-nil, the batch is then run again
// exactly as ProcessBatch runs it, with each applying one message at a time
// inside its own savepoint, so the failing message is isolated and reported
// in its Result while the others commit. If each is nil, ProcessBatchSet
// returns the failure as a *HandlerError and nothing is committed; the caller
// acknowledges nothing, or splits the batch itself.
//
// Set-based SQL has one trap that per-message handlers do not: an UPDATE
// … FROM a list that names one row twice changes it once (PostgreSQL and
// SQLite pick one of the source rows). Aggregate per target row first, as
// the example does.
//
// Retryable failures (serialization, deadlock, SQLITE_BUSY) rerun the whole
// batch in a fresh transaction, set included. Results and errors are as for
// ProcessBatch.
func (in *Inbox) ProcessBatchSet(ctx context.Context, msgs []Message, set SetHandler, each BatchHandler) ([]Result, error) {
	if set == nil {
		return nil, fmt.Errorf("inbox: nil set handler: %w", idem.ErrInvalidArgument)
	}
	return in.traceBatch(ctx, idem.OpInboxProcessBatchSet, msgs, set, each)
}

func (in *Inbox) processBatch(ctx context.Context, msgs []Message, set SetHandler, fn BatchHandler, sp *span) ([]Result, error) {
	// A message with an unusable key or fingerprint fails alone, before any
	// I/O: it can never be processed, and must not hold the others back.
	var results []Result // nil while every message is valid
	var valid []Message
	var pos []int // pos[j] is valid[j]'s index in msgs
	for i, m := range msgs {
		err := in.checkMessage(m)
		if err == nil {
			if results != nil {
				valid, pos = append(valid, m), append(pos, i)
			}
			continue
		}
		if results == nil {
			results = make([]Result, len(msgs))
			valid = append(make([]Message, 0, len(msgs)), msgs[:i]...)
			for j := range i {
				pos = append(pos, j)
			}
		}
		results[i] = Result{Key: m.Key, Err: fmt.Errorf("message %d: %w", i, err)}
		if in.cfg.hooks != nil {
			in.cfg.hooks.Processed(in.consumer, false, results[i].Err, 0)
		}
	}
	if results == nil {
		return in.runBatch(ctx, msgs, set, fn, sp)
	}
	if len(valid) == 0 {
		return results, nil
	}
	r, err := in.runBatch(ctx, valid, set, fn, sp)
	if err != nil {
		return nil, err
	}
	for j, i := range pos {
		results[i] = r[j]
	}
	return results, nil
}

// runBatch processes msgs, all of them valid.
func (in *Inbox) runBatch(ctx context.Context, msgs []Message, set SetHandler, fn BatchHandler, sp *span) ([]Result, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	if err := in.ready(ctx); err != nil {
		if in.cfg.hooks != nil {
			in.cfg.hooks.Processed(in.consumer, false, err, 0)
		}
		return nil, err
	}
	start := time.Now()
	var results []Result
	err := in.withRetry(ctx, func() (err error) {
		sp.attempt()
		results, err = in.batchFast(ctx, msgs, set, fn)
		if errors.Is(err, errSlowPath) && fn == nil {
			// Only a set handler without a per-message fallback gets here:
			// MySQL found a recorded key, or set failed.
			var he *HandlerError
			if errors.As(err, &he) {
				return he
			}
			results, err = in.batchSlowSet(ctx, msgs, set)
			return err
		}
		if errors.Is(err, errSlowPath) {
			results, err = in.batchSlow(ctx, msgs, fn)
		}
		return err
	})
	in.h.Stmts.PrepareMissed(ctx)
	if in.cfg.hooks != nil {
		d := time.Since(start)
		in.cfg.hooks.Batch(in.consumer, len(msgs), d)
		for _, r := range results {
			in.cfg.hooks.Processed(in.consumer, r.Applied, r.Err, d)
		}
		if err != nil {
			in.cfg.hooks.Processed(in.consumer, false, err, d)
		}
	}
	if err != nil {
		return nil, err
	}
	return results, nil
}

// batchFast records all keys with multi-row inserts and applies the new ones.
func (in *Inbox) batchFast(ctx context.Context, msgs []Message, set SetHandler, fn BatchHandler) ([]Result, error) {
	tx, err := in.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()

	// First occurrence of each key.
	first := make(map[string]int, len(msgs))
	distinct := make([]int, 0, len(msgs))
	for i, m := range msgs {
		if _, ok := first[m.Key]; !ok {
			first[m.Key] = i
			distinct = append(distinct, i)
		}
	}
	inserted, err := in.insertMany(ctx, tx, msgs, distinct)
	if err != nil {
		return nil, err
	}

	results := make([]Result, len(msgs))
	var dups []int // first occurrences already recorded before this batch
	var fresh []Message
	for i, m := range msgs {
		results[i].Key = m.Key
		f := first[m.Key]
		switch {
		case f != i: // repeated within the batch
			results[i].Err = matchFingerprint(m, msgs[f].Fingerprint)
		case inserted[m.Key]:
			results[i].Applied = true
			if set != nil {
				fresh = append(fresh, m)
				continue
			}
			if err := fn(ctx, tx, m); err != nil {
				if in.retryable(err) {
					return nil, err
				}
				return nil, errSlowPath
			}
		default:
			dups = append(dups, i)
		}
	}
	if len(fresh) > 0 {
		if err := set(ctx, tx, fresh); err != nil {
			if in.retryable(err) {
				return nil, err
			}
			if fn == nil {
				return nil, fmt.Errorf("%w: %w", errSlowPath, &HandlerError{Key: fmt.Sprintf("batch of %d", len(msgs)), Err: err})
			}
			return nil, errSlowPath
		}
	}
	for _, i := range dups {
		if err := in.checkFingerprint(ctx, tx, msgs[i]); err != nil {
			if !errors.Is(err, idem.ErrFingerprintMismatch) {
				return nil, err
			}
			results[i].Err = err
		}
	}
	// A later occurrence whose first occurrence was a recorded duplicate
	// compares against the stored fingerprint too.
	for i, m := range msgs {
		if f := first[m.Key]; f != i && results[i].Err == nil && !inserted[m.Key] && len(m.Fingerprint) > 0 {
			if err := in.checkFingerprint(ctx, tx, m); err != nil {
				if !errors.Is(err, idem.ErrFingerprintMismatch) {
					return nil, err
				}
				results[i].Err = err
			}
		}
	}
	if err := in.commit(ctx, tx, fmt.Sprintf("batch of %d", len(msgs))); err != nil {
		return nil, err
	}
	return results, nil
}

// insertMany inserts the keys of msgs[idx...] and returns the set actually
// inserted. On MySQL's rows layout, which has no RETURNING, it returns
// errSlowPath unless every key was new.
func (in *Inbox) insertMany(ctx context.Context, tx *sql.Tx, msgs []Message, idx []int) (map[string]bool, error) {
	em := make([]engine.Message, len(msgs))
	for _, i := range idx {
		em[i] = engine.Message{Key: msgs[i].Key, Fingerprint: msgs[i].Fingerprint}
	}
	return in.engine().Record(ctx, tx, em, idx)
}

// batchSlowSet is the MySQL path of a set handler without a per-message
// fallback when some keys were already recorded (MySQL's insert cannot say
// which): it finds the new keys one insert at a time, then calls set once
// for them.
func (in *Inbox) batchSlowSet(ctx context.Context, msgs []Message, set SetHandler) ([]Result, error) {
	tx, err := in.beginDetached(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	results := make([]Result, len(msgs))
	var fresh []Message
	for i, m := range msgs {
		results[i].Key = m.Key
		inserted, err := in.insertOne(ctx, tx, m)
		if err != nil {
			return nil, err
		}
		if inserted {
			results[i].Applied = true
			fresh = append(fresh, m)
			continue
		}
		if err := in.checkFingerprint(ctx, tx, m); err != nil {
			if !errors.Is(err, idem.ErrFingerprintMismatch) {
				return nil, err
			}
			results[i].Err = err
		}
	}
	if len(fresh) > 0 {
		if err := set(ctx, tx, fresh); err != nil {
			if in.retryable(err) {
				return nil, err
			}
			return nil, &HandlerError{Key: fmt.Sprintf("batch of %d", len(msgs)), Err: err}
		}
	}
	if err := in.commit(ctx, tx, fmt.Sprintf("batch of %d", len(msgs))); err != nil {
		return nil, err
	}
	return results, nil
}

// batchSlow runs each message inside its own savepoint: the key insert and
// the effect roll back together when the handler fails.
func (in *Inbox) batchSlow(ctx context.Context, msgs []Message, fn BatchHandler) ([]Result, error) {
	tx, err := in.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	results := make([]Result, len(msgs))
	for i, m := range msgs {
		results[i].Key = m.Key
		if _, err := tx.ExecContext(ctx, "SAVEPOINT idem_msg"); err != nil {
			return nil, fmt.Errorf("inbox: savepoint: %w", err)
		}
		applied, err := in.slowOne(ctx, tx, m, fn)
		if err != nil {
			if in.retryable(err) || !isMessageError(err) {
				return nil, err // the whole transaction is gone or suspect
			}
			if _, rerr := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT idem_msg"); rerr != nil {
				return nil, fmt.Errorf("inbox: rollback to savepoint after %v: %w", err, rerr)
			}
			results[i].Err = err
		} else {
			results[i].Applied = applied
		}
		if _, err := tx.ExecContext(ctx, "RELEASE SAVEPOINT idem_msg"); err != nil {
			return nil, fmt.Errorf("inbox: release savepoint: %w", err)
		}
	}
	if err := in.commit(ctx, tx, fmt.Sprintf("batch of %d", len(msgs))); err != nil {
		return nil, err
	}
	return results, nil
}

func (in *Inbox) slowOne(ctx context.Context, tx *sql.Tx, m Message, fn BatchHandler) (bool, error) {
	inserted, err := in.insertOne(ctx, tx, m)
	if err != nil {
		return false, err
	}
	if !inserted {
		return false, in.checkFingerprint(ctx, tx, m)
	}
	if err := fn(ctx, tx, m); err != nil {
		return false, &HandlerError{Key: m.Key, Err: err}
	}
	return true, nil
}

// isMessageError reports whether err belongs to one message (its handler
// failed, or its fingerprint did not match) rather than to the transaction.
func isMessageError(err error) bool {
	var he *HandlerError
	return errors.As(err, &he) || errors.Is(err, idem.ErrFingerprintMismatch)
}
