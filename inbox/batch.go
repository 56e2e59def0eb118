package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idem-go/idem/sqldialect"
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

// maxRowsPerInsert bounds one multi-row insert (3 parameters a row, well
// under every dialect's limit on bind parameters).
const maxRowsPerInsert = 500

// errSlowPath asks ProcessBatch to redo the batch with a savepoint per
// message.
var errSlowPath = errors.New("inbox: batch needs the per-message path")

// ProcessBatch processes msgs in one transaction, so that one commit (one
// fsync) is paid for the whole batch. Each message is applied at most once,
// exactly as by [Inbox.ProcessMessage], and a failing message rolls back
// alone: its key is not recorded, its Result carries the error, and the other
// messages commit.
//
// The fast path records every key with one multi-row insert and runs the
// handlers in the same transaction. If any handler fails (or, on MySQL, any
// key is already present), that transaction is rolled back whole and the batch
// is run again with a savepoint around each message's key and effect, so a
// failed message's key is never committed without its effect. Handlers must
// therefore be safe to run again, as they must be for serialization retries:
// do all database work through tx.
//
// A key that appears twice in msgs is applied once, by its first occurrence
// that succeeds.
//
// If ProcessBatch returns an error, nothing was committed (or, for a
// *CommitError, the outcome is unknown): acknowledge none of the messages.
// Otherwise acknowledge every message whose Result.Err is nil.
func (in *Inbox) ProcessBatch(ctx context.Context, msgs []Message, fn BatchHandler) ([]Result, error) {
	if fn == nil {
		return nil, fmt.Errorf("%w: nil handler", ErrInvalidArgument)
	}
	for i, m := range msgs {
		if err := in.checkMessage(m); err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
	}
	if len(msgs) == 0 {
		return nil, nil
	}
	start := time.Now()
	var results []Result
	err := in.withRetry(ctx, func() (err error) {
		results, err = in.batchFast(ctx, msgs, fn)
		if errors.Is(err, errSlowPath) {
			results, err = in.batchSlow(ctx, msgs, fn)
		}
		return err
	})
	if in.cfg.hooks != nil {
		d := time.Since(start)
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
func (in *Inbox) batchFast(ctx context.Context, msgs []Message, fn BatchHandler) ([]Result, error) {
	tx, err := in.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("inbox: begin: %w", err)
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
	for i, m := range msgs {
		results[i].Key = m.Key
		f := first[m.Key]
		switch {
		case f != i: // repeated within the batch
			results[i].Err = matchFingerprint(m, msgs[f].Fingerprint)
		case inserted[m.Key]:
			if err := fn(ctx, tx, m); err != nil {
				if in.retryable(err) {
					return nil, err
				}
				return nil, errSlowPath
			}
			results[i].Applied = true
		default:
			dups = append(dups, i)
		}
	}
	for _, i := range dups {
		if err := in.checkFingerprint(ctx, tx, msgs[i]); err != nil {
			if !errors.Is(err, ErrFingerprintMismatch) {
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
				if !errors.Is(err, ErrFingerprintMismatch) {
					return nil, err
				}
				results[i].Err = err
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, &CommitError{Key: fmt.Sprintf("batch of %d", len(msgs)), Err: err}
	}
	return results, nil
}

// insertMany inserts the keys of msgs[idx...] and returns the set actually
// inserted. On MySQL, which has no RETURNING, it returns errSlowPath unless
// every key was new.
func (in *Inbox) insertMany(ctx context.Context, tx *sql.Tx, msgs []Message, idx []int) (map[string]bool, error) {
	inserted := make(map[string]bool, len(idx))
	for lo := 0; lo < len(idx); lo += maxRowsPerInsert {
		chunk := idx[lo:min(lo+maxRowsPerInsert, len(idx))]
		args := make([]any, 0, 3*len(chunk))
		for _, i := range chunk {
			args = append(args, in.consumer, msgs[i].Key, nullBytes(msgs[i].Fingerprint))
		}
		q := multiInsert(in.dialect, in.cfg.table, len(chunk))
		if in.dialect == sqldialect.MySQL {
			res, err := in.exec(ctx, tx, q, args...)
			if err != nil {
				return nil, fmt.Errorf("inbox: record keys: %w", err)
			}
			n, err := res.RowsAffected()
			if err != nil {
				return nil, fmt.Errorf("inbox: record keys: rows affected: %w", err)
			}
			if n != int64(len(chunk)) {
				return nil, errSlowPath
			}
			for _, i := range chunk {
				inserted[msgs[i].Key] = true
			}
			continue
		}
		rows, err := in.query(ctx, tx, q, args...)
		if err != nil {
			return nil, fmt.Errorf("inbox: record keys: %w", err)
		}
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				rows.Close()
				return nil, fmt.Errorf("inbox: record keys: %w", err)
			}
			inserted[k] = true
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("inbox: record keys: %w", err)
		}
	}
	return inserted, nil
}

// batchSlow runs each message inside its own savepoint: the key insert and
// the effect roll back together when the handler fails.
func (in *Inbox) batchSlow(ctx context.Context, msgs []Message, fn BatchHandler) ([]Result, error) {
	tx, err := in.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("inbox: begin: %w", err)
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
	if err := tx.Commit(); err != nil {
		return nil, &CommitError{Key: fmt.Sprintf("batch of %d", len(msgs)), Err: err}
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
	return errors.As(err, &he) || errors.Is(err, ErrFingerprintMismatch)
}
