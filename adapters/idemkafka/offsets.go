package idemkafka

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/internal/consume"
	"github.com/idem-go/idem/internal/ddl"
	"github.com/idem-go/idem/sqldialect"
)

// errFenced: the stored offset is already past the batch; another member
// applied it, or this one did before its fetch position moved back.
var errFenced = errors.New("idemkafka: partition offset moved by another member")

// handlerError marks an error returned by the Handler in offsets mode, as
// opposed to a database error around it.
type handlerError struct{ err error }

func (e *handlerError) Error() string { return "idemkafka: handler: " + e.err.Error() }
func (e *handlerError) Unwrap() error { return e.err }

// OffsetConsumer is a consume loop over a Kafka consumer group that keeps
// each partition's next offset in the database, in the same transaction as
// the records' effects, instead of a key per record.
type OffsetConsumer struct {
	g   *group
	db  *sql.DB
	d   sqldialect.Dialect
	h   Handler
	pos positions // the stored offset each partition's next batch expects
}

// NewOffsetConsumer builds an OffsetConsumer: the next offset to consume of
// each partition is kept in a table of db (DefaultOffsetsTable: group_id,
// topic, partition_id, next_offset), written in the same transaction as h's
// effect, and the consumer seeks to it whenever a partition is assigned.
// That is exactly-once from Kafka into the database without a key per
// record, as long as every effect of h is in db. Commits to Kafka still
// happen (for lag monitoring) but are never read back.
//
// The offset update is conditional: the stored offset must be exactly the
// one this consumer read or wrote last for the partition (where its fetch
// position came from). A member that lost its partitions without knowing
// (a zombie) so cannot commit a batch that the new owner has already
// applied, and a database that lost its last commits (a failover to a
// standby that lagged, which database/sql follows silently by reconnecting)
// cannot be written over the gap: either way the transaction rolls back
// and the consumer seeks to the stored offset, forward or back, and
// consumes from there. A batch that starts below the offset the consumer
// stored last is refused the same way: records fetched again after the
// client's position moved back without a new assignment (a reset after an
// out-of-range fetch, a SetOffsets on Client) are not applied twice.
// Supported dialects: PostgreSQL and SQLite. Call Migrate,
// or apply SchemaSQL, before Run. kopts are as for NewConsumer, and
// NewOffsetConsumer adds its kgo.AdjustFetchOffsetsFn. The options that
// apply: WithOffsetsTable, WithMaxAttempts, WithBackoff, WithDeadLetter,
// WithBatchSize, WithLogger, WithObserver.
func NewOffsetConsumer(db *sql.DB, d sqldialect.Dialect, h Handler, kopts []kgo.Opt, opts ...Option) (*OffsetConsumer, error) {
	if db == nil {
		return nil, invalid("nil db")
	}
	if d != sqldialect.Postgres && d != sqldialect.SQLite {
		return nil, invalid("offsets in the database support PostgreSQL and SQLite, not %v", d)
	}
	if h == nil {
		return nil, invalid("nil handler")
	}
	g, err := newGroup(opts, optOffsetsTable, "NewOffsetConsumer")
	if err != nil {
		return nil, err
	}
	c := &OffsetConsumer{g: g, db: db, d: d, h: h}
	if err := g.start(kopts, c.process, kgo.AdjustFetchOffsetsFn(c.adjustOffsets)); err != nil {
		return nil, err
	}
	return c, nil
}

// Client returns the franz-go client the OffsetConsumer owns, for producing
// and admin requests. Do not poll, commit or close it.
func (c *OffsetConsumer) Client() *kgo.Client { return c.g.cl }

// Run polls, processes and stores offsets until ctx ends (returning ctx's
// error), Close is called (an error wrapping idem.ErrClosed), or a record
// can neither be applied nor dead-lettered (an error). Run may be called
// once. What happens if the process dies:
//   - before a batch's transaction commits: neither effects nor the offset
//     are recorded; the records are consumed again from the stored offset.
//   - after it commits, before the Kafka offset commit: the next owner seeks
//     to the stored offset, past the applied records; nothing is repeated.
//   - after the Kafka offset commit: the records are not consumed again.
func (c *OffsetConsumer) Run(ctx context.Context) error { return c.g.run(ctx) }

// Close stops Run (waiting for it to return), commits the marked offsets to
// Kafka while leaving the group, and closes the client.
func (c *OffsetConsumer) Close() { c.g.close() }

// SchemaSQL returns the statement that creates the offsets table
// (idempotent: IF NOT EXISTS), for migration tools.
func (c *OffsetConsumer) SchemaSQL() []string {
	return []string{"CREATE TABLE IF NOT EXISTS " + c.g.cfg.table + ` (
	group_id VARCHAR(255) NOT NULL,
	topic VARCHAR(255) NOT NULL,
	partition_id INTEGER NOT NULL,
	next_offset BIGINT NOT NULL,
	PRIMARY KEY (group_id, topic, partition_id))`}
}

// Migrate runs SchemaSQL on the consumer's database. Several processes
// may call it at once: on PostgreSQL it runs in a transaction after a
// transaction-scoped advisory lock.
func (c *OffsetConsumer) Migrate(ctx context.Context) error {
	if err := ddl.Exec(ctx, c.db, c.d, c.g.cfg.table, c.SchemaSQL()); err != nil {
		return fmt.Errorf("idemkafka: migrate: %w", err)
	}
	return nil
}

// adjustOffsets replaces the offsets Kafka returned for the assigned
// partitions by the ones committed with the effects, where there are any.
func (c *OffsetConsumer) adjustOffsets(ctx context.Context, offs map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	select {
	case <-c.g.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	for topic, ps := range offs {
		for p := range ps {
			next, ok, err := c.storedOffset(ctx, topic, p)
			if err != nil {
				c.g.cfg.Logger.Error("idemkafka: reading stored offset", "topic", topic, "partition", p, "err", err)
				return nil, err
			}
			c.pos.set(topic, p, next, ok)
			if ok {
				ps[p] = kgo.NewOffset().At(next).WithEpoch(-1)
			}
		}
	}
	return offs, nil
}

func (c *OffsetConsumer) storedOffset(ctx context.Context, topic string, p int32) (int64, bool, error) {
	q := "SELECT next_offset FROM " + c.g.cfg.table + " WHERE group_id = " + c.d.Placeholder(1) +
		" AND topic = " + c.d.Placeholder(2) + " AND partition_id = " + c.d.Placeholder(3)
	var next int64
	err := c.db.QueryRowContext(ctx, q, c.g.name, topic, p).Scan(&next)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("idemkafka: read offset: %w", err)
	}
	return next, true, nil
}

// advance sets the partition's next offset to next inside tx, unless the
// stored offset is not the one expected (errFenced): the one this consumer
// last read or wrote, or, when it knows none (no row was stored when the
// partition was assigned), one not past first.
func (c *OffsetConsumer) advance(ctx context.Context, tx *sql.Tx, topic string, p int32, first, next int64) error {
	ph := c.d.Placeholder
	cond := ".next_offset <= " + ph(5)
	arg := first
	if want, ok := c.pos.get(topic, p); ok {
		cond, arg = ".next_offset = "+ph(5), want
	}
	q := "INSERT INTO " + c.g.cfg.table + " (group_id, topic, partition_id, next_offset) VALUES (" +
		c.d.Placeholders(1, 4) + ") ON CONFLICT (group_id, topic, partition_id) DO UPDATE SET next_offset = excluded.next_offset WHERE " +
		c.g.cfg.table + cond
	res, err := tx.ExecContext(ctx, q, c.g.name, topic, p, next, arg)
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
func (c *OffsetConsumer) inTx(ctx context.Context, topic string, p int32, first, next int64, fn func(*sql.Tx) error) error {
	for attempt := 1; ; attempt++ {
		err := c.tryTx(ctx, topic, p, first, next, fn)
		if err == nil || attempt >= 10 || !c.d.Retryable(err) {
			return err
		}
		if err := c.g.cfg.Backoff.Wait(ctx, 0); err != nil {
			return err
		}
	}
}

func (c *OffsetConsumer) tryTx(ctx context.Context, topic string, p int32, first, next int64, fn func(*sql.Tx) error) error {
	// A batch that starts below the offset this consumer stored last holds
	// records it applied already: the client's fetch position moved back
	// without an assignment (a reset after an out-of-range fetch, a
	// SetOffsets). The row would pass the fence below (it holds the offset
	// expected), so the batch is fenced here, before its handler runs, and
	// the consumer seeks to the stored offset. A batch may start above it:
	// control records and compaction leave gaps in a partition's offsets.
	if want, ok := c.pos.get(topic, p); ok && first < want {
		return errFenced
	}
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
		// Unknown: the next batch's fence decides, against what the
		// database then has.
		c.pos.forget(topic, p)
		return fmt.Errorf("idemkafka: commit (outcome unknown): %w", err)
	}
	c.pos.set(topic, p, next, true)
	return nil
}

// process applies one partition's records with the offset in the same
// transaction: all of them in one transaction when every handler succeeds,
// else one record per transaction, in order, with retries and
// dead-lettering. mark reports whether the last record may be marked in
// Kafka.
func (c *OffsetConsumer) process(ctx context.Context, recs []*kgo.Record) (mark bool, err error) {
	topic, p := recs[0].Topic, recs[0].Partition
	ds := deliveries(recs)
	ctx, batch := c.g.cfg.StartBatch(ctx, len(ds))
	defer func() { batch.End(ctx, err) }()
	defer c.g.cfg.unsettled(ds, &err)
	for i := range ds {
		c.g.cfg.Start(ctx, &ds[i])
	}
	err = c.apply(ctx, recs)
	var he *handlerError
	switch {
	case err == nil:
		for i := range ds {
			dec := consume.Decision{Outcome: idem.Applied}
			c.g.cfg.Report(&ds[i], dec)
			batch.Count(dec)
		}
		return true, nil
	case errors.Is(err, errFenced):
		c.g.cfg.unsettled(ds, &err) // another member applied them
		return false, c.reseek(ctx, topic, p)
	case !errors.As(err, &he):
		return false, err
	}
	for i := range ds {
		dec, err := c.applyOne(ctx, &ds[i])
		if err != nil {
			if errors.Is(err, errFenced) {
				c.g.cfg.unsettled(ds, &err)
				return false, c.reseek(ctx, topic, p)
			}
			return false, err
		}
		batch.Count(dec)
	}
	return true, nil
}

// apply runs the handler for recs, consecutive records of one partition, in
// one transaction that advances the partition's offset past them. A handler
// error is a *handlerError.
func (c *OffsetConsumer) apply(ctx context.Context, recs []*kgo.Record) error {
	first, last := recs[0], recs[len(recs)-1]
	return c.inTx(ctx, first.Topic, first.Partition, first.Offset, last.Offset+1, func(tx *sql.Tx) error {
		for _, r := range recs {
			if err := c.h(ctx, tx, r); err != nil {
				return &handlerError{err}
			}
		}
		return nil
	})
}

// applyOne applies d's record in its own transaction, retrying handler
// errors, and dead-letters it (then stores its offset) when its attempts
// are spent. Each run has a span of its own.
func (c *OffsetConsumer) applyOne(ctx context.Context, d *delivery) (consume.Decision, error) {
	r := d.Msg
	for {
		sctx := c.g.cfg.Start(ctx, d)
		err := c.apply(sctx, []*kgo.Record{r})
		var he *handlerError
		switch {
		case err == nil:
			dec := consume.Decision{Outcome: idem.Applied}
			c.g.cfg.Report(d, dec)
			return dec, nil
		case !errors.As(err, &he):
			return consume.Decision{}, err
		}
		if cerr := ctx.Err(); cerr != nil {
			return consume.Decision{}, cerr
		}
		dec := c.g.cfg.Decide(d, true, he.err)
		if dec.Outcome == idem.Retried {
			if err := c.g.cfg.rerun(ctx, d, dec); err != nil {
				return consume.Decision{}, err
			}
			continue
		}
		if err := c.g.deadLetter(ctx, d, dec); err != nil {
			return consume.Decision{}, err
		}
		if err := c.inTx(ctx, r.Topic, r.Partition, r.Offset, r.Offset+1, nil); err != nil {
			return consume.Decision{}, err
		}
		c.g.cfg.Report(d, dec)
		return dec, nil
	}
}

// reseek moves consumption of the partition to the offset stored in the
// database, after it was found elsewhere than expected: moved forward by
// another member, or back by a database that lost its last commits (the
// records after it are consumed again), or after a batch started below it
// (the records before it are skipped: they were applied).
func (c *OffsetConsumer) reseek(ctx context.Context, topic string, p int32) error {
	next, ok, err := c.storedOffset(ctx, topic, p)
	if err != nil {
		return err
	}
	c.pos.set(topic, p, next, ok)
	c.g.cfg.Logger.Warn("idemkafka: stored offset is not where this consumer left it (moved by another member, or a database failover lost commits), or the batch starts below it (the client's fetch position moved back); seeking", "topic", topic, "partition", p, "offset", next, "stored", ok)
	if ok {
		c.g.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{topic: {p: {Epoch: -1, Offset: next}}})
	}
	return nil
}

// positions is, per partition, the stored offset the next batch's fence
// expects: read when the partition was assigned or re-sought, written by
// the last commit. A partition without one (no row stored yet, or a commit
// whose outcome is unknown) is fenced only against offsets past the batch.
type positions struct {
	mu sync.Mutex
	m  map[topicPartition]int64
}

type topicPartition struct {
	topic string
	p     int32
}

func (ps *positions) set(topic string, p int32, next int64, ok bool) {
	if !ok {
		ps.forget(topic, p)
		return
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.m == nil {
		ps.m = make(map[topicPartition]int64)
	}
	ps.m[topicPartition{topic, p}] = next
}

func (ps *positions) get(topic string, p int32) (int64, bool) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	v, ok := ps.m[topicPartition{topic, p}]
	return v, ok
}

func (ps *positions) forget(topic string, p int32) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	delete(ps.m, topicPartition{topic, p})
}
