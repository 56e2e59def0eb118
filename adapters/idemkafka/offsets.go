package idemkafka

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/sqldialect"
)

// errFenced: the stored offset is already past the batch; another member
// applied it.
var errFenced = errors.New("idemkafka: partition offset moved by another member")

// handlerError marks an error returned by the Handler in offsets mode, as
// opposed to a database error around it.
type handlerError struct{ err error }

func (e *handlerError) Error() string { return "idemkafka: handler: " + e.err.Error() }
func (e *handlerError) Unwrap() error { return e.err }

// OffsetsSchemaSQL returns the statement that creates the offsets table of
// offsets-in-database mode (idempotent: IF NOT EXISTS), for migration tools.
// table "" means DefaultOffsetsTable.
func OffsetsSchemaSQL(d sqldialect.Dialect, table string) ([]string, error) {
	if table == "" {
		table = DefaultOffsetsTable
	}
	if !identRE.MatchString(table) {
		return nil, fmt.Errorf("idemkafka: offsets table %q is not a plain identifier: %w", table, idem.ErrInvalidOption)
	}
	if d != sqldialect.Postgres && d != sqldialect.SQLite {
		return nil, fmt.Errorf("idemkafka: offsets table on %v: %w", d, idem.ErrInvalidOption)
	}
	return []string{"CREATE TABLE IF NOT EXISTS " + table + ` (
	group_id VARCHAR(255) NOT NULL,
	topic VARCHAR(255) NOT NULL,
	partition_id INTEGER NOT NULL,
	next_offset BIGINT NOT NULL,
	PRIMARY KEY (group_id, topic, partition_id))`}, nil
}

// Migrate creates what the Consumer stores in its database: the inbox's key
// table, or in offsets-in-database mode the offsets table. In keystore mode
// it does nothing (stores create their own tables).
func (c *Consumer) Migrate(ctx context.Context) error {
	switch {
	case c.in != nil:
		return c.in.Migrate(ctx)
	case c.db == nil:
		return nil
	}
	stmts, err := OffsetsSchemaSQL(c.d, c.cfg.table)
	if err != nil {
		return err
	}
	for _, s := range stmts {
		if _, err := c.db.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("idemkafka: migrate: %w", err)
		}
	}
	return nil
}

// adjustOffsets replaces the offsets Kafka returned for the assigned
// partitions by the ones committed with the effects, where there are any.
func (c *Consumer) adjustOffsets(ctx context.Context, offs map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	select {
	case <-c.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	for topic, ps := range offs {
		for p := range ps {
			next, ok, err := c.storedOffset(ctx, topic, p)
			if err != nil {
				c.cfg.log.Error("idemkafka: reading stored offset", "topic", topic, "partition", p, "err", err)
				return nil, err
			}
			if ok {
				ps[p] = kgo.NewOffset().At(next).WithEpoch(-1)
			}
		}
	}
	return offs, nil
}

func (c *Consumer) storedOffset(ctx context.Context, topic string, p int32) (int64, bool, error) {
	q := "SELECT next_offset FROM " + c.cfg.table + " WHERE group_id = " + c.d.Placeholder(1) +
		" AND topic = " + c.d.Placeholder(2) + " AND partition_id = " + c.d.Placeholder(3)
	var next int64
	err := c.db.QueryRowContext(ctx, q, c.group, topic, p).Scan(&next)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("idemkafka: read offset: %w", err)
	}
	return next, true, nil
}

// advance sets the partition's next offset to next inside tx, unless the
// stored offset is already past first (errFenced).
func (c *Consumer) advance(ctx context.Context, tx *sql.Tx, topic string, p int32, first, next int64) error {
	ph := c.d.Placeholder
	q := "INSERT INTO " + c.cfg.table + " (group_id, topic, partition_id, next_offset) VALUES (" +
		c.d.Placeholders(1, 4) + ") ON CONFLICT (group_id, topic, partition_id) DO UPDATE SET next_offset = excluded.next_offset WHERE " +
		c.cfg.table + ".next_offset <= " + ph(5)
	res, err := tx.ExecContext(ctx, q, c.group, topic, p, next, first)
	if err != nil {
		return fmt.Errorf("idemkafka: store offset: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("idemkafka: store offset: %w", err)
	}
	if n == 0 {
		return errFenced
	}
	return nil
}

// inTx runs fn in a transaction with the partition's offset advanced to next,
// retrying serialization failures and busy databases a few times.
func (c *Consumer) inTx(ctx context.Context, topic string, p int32, first, next int64, fn func(*sql.Tx) error) error {
	for attempt := 1; ; attempt++ {
		err := c.tryTx(ctx, topic, p, first, next, fn)
		if err == nil || attempt >= 10 || !c.d.Retryable(err) {
			return err
		}
		if err := c.sleep(ctx, 1); err != nil {
			return err
		}
	}
}

func (c *Consumer) tryTx(ctx context.Context, topic string, p int32, first, next int64, fn func(*sql.Tx) error) error {
	tx, err := c.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("idemkafka: begin: %w", err)
	}
	if fn != nil {
		if err := fn(tx); err != nil {
			_ = tx.Rollback()
			return err
		}
	}
	if err := c.advance(ctx, tx, topic, p, first, next); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("idemkafka: commit (outcome unknown): %w", err)
	}
	return nil
}

// processOffsets applies one partition's records with the offset in the same
// transaction: all of them in one transaction when every handler succeeds,
// else one record per transaction, in order, with retries and dead-lettering.
// mark reports whether the last record may be marked in Kafka.
func (c *Consumer) processOffsets(ctx context.Context, recs []*kgo.Record) (mark bool, err error) {
	topic, p := recs[0].Topic, recs[0].Partition
	last := recs[len(recs)-1]
	err = c.inTx(ctx, topic, p, recs[0].Offset, last.Offset+1, func(tx *sql.Tx) error {
		for _, r := range recs {
			if err := c.h(ctx, tx, r); err != nil {
				return &handlerError{err}
			}
		}
		return nil
	})
	var he *handlerError
	switch {
	case err == nil:
		for _, r := range recs {
			c.outcome(r, Applied, nil)
		}
		return true, nil
	case errors.Is(err, errFenced):
		return false, c.reseek(ctx, topic, p)
	case !errors.As(err, &he):
		return false, err
	}
	for _, r := range recs {
		if err := c.applyOneOffset(ctx, r); err != nil {
			if errors.Is(err, errFenced) {
				return false, c.reseek(ctx, topic, p)
			}
			return false, err
		}
	}
	return true, nil
}

// applyOneOffset applies r in its own transaction, retrying handler errors,
// and dead-letters it (then stores its offset) when retries are spent.
func (c *Consumer) applyOneOffset(ctx context.Context, r *kgo.Record) error {
	for attempts := 1; ; attempts++ {
		err := c.inTx(ctx, r.Topic, r.Partition, r.Offset, r.Offset+1, func(tx *sql.Tx) error {
			if err := c.h(ctx, tx, r); err != nil {
				return &handlerError{err}
			}
			return nil
		})
		var he *handlerError
		switch {
		case err == nil:
			c.outcome(r, Applied, nil)
			return nil
		case !errors.As(err, &he):
			return err
		}
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		reason := ""
		if idem.IsPermanent(err) {
			reason = ReasonPermanent
		} else if attempts > c.cfg.retries {
			reason = ReasonHandler
		}
		if reason != "" {
			if err := c.deadLetter(ctx, r, reason, attempts, he.err); err != nil {
				return err
			}
			return c.inTx(ctx, r.Topic, r.Partition, r.Offset, r.Offset+1, nil)
		}
		c.cfg.log.Info("idemkafka: handler failed, retrying", "topic", r.Topic, "partition", r.Partition,
			"offset", r.Offset, "attempt", attempts, "err", err)
		if err := c.sleep(ctx, attempts); err != nil {
			return err
		}
	}
}

// reseek moves consumption of the partition to the offset stored in the
// database, after another member was found to have moved it.
func (c *Consumer) reseek(ctx context.Context, topic string, p int32) error {
	next, ok, err := c.storedOffset(ctx, topic, p)
	if err != nil {
		return err
	}
	c.cfg.log.Warn("idemkafka: offset moved by another member; seeking", "topic", topic, "partition", p, "offset", next)
	if ok {
		c.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{topic: {p: {Epoch: -1, Offset: next}}})
	}
	return nil
}
