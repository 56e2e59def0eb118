package idemkafka

import (
	"context"
	"database/sql"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idem-go/idem/adapters/internal/consume"
	"github.com/idem-go/idem/inbox"
)

// Handler applies one record's effect inside tx. It must do all its database
// work through tx: the dedup key (for an OffsetConsumer, the consumed
// offset) commits in the same transaction. It may run more than once for one
// record (a retry after an error, a batch replayed one record at a time);
// only one run's effect ever commits.
type Handler func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error

// SetHandler applies the effects of several records at once inside tx,
// typically with set-based statements (one multi-row INSERT or UPDATE for
// all of them); see WithSetHandler. recs holds, in log order, exactly the
// records of one partition's batch whose keys this transaction recorded:
// duplicates are left out, and recs is never empty. The same rules as for a
// Handler apply: all database work through tx, and it may run more than once
// for one batch (a retry), only one run's effect committing. Aggregate per
// target row before a set-based UPDATE (an UPDATE … FROM a list naming one
// row twice changes it once). It must not retain recs after it returns.
type SetHandler func(ctx context.Context, tx *sql.Tx, recs []*kgo.Record) error

// Consumer is a consume loop over a Kafka consumer group that applies each
// record through an inbox, and only then marks its offset for commit.
type Consumer struct {
	g    *group
	h    Handler
	core *consume.Inbox[*kgo.Record]
}

// NewConsumer builds a Consumer whose records are deduplicated by in: each
// record's key (by default the HeaderID header; see WithKey) and h's effect
// commit in one transaction, one transaction per polled batch of a partition
// (inbox.ProcessBatch; with WithSetHandler, inbox.ProcessBatchSet, and h may
// then be nil).
//
// kopts configure the franz-go client, which the Consumer owns and closes:
// they must name the group (kgo.ConsumerGroup) and the topics. NewConsumer
// adds kgo.BlockRebalanceOnPoll, kgo.AutoCommitMarks and its own
// OnPartitionsRevoked and OnPartitionsLost, replacing any given in kopts.
// Name in's consumer after the group: keys are scoped by it. Every option
// applies except WithOffsetsTable and WithKeystoreOptions.
func NewConsumer(in *inbox.Inbox, h Handler, kopts []kgo.Opt, opts ...Option) (*Consumer, error) {
	if in == nil {
		return nil, invalid("nil inbox")
	}
	g, err := newGroup(opts, optKey|optFingerprint|optMissingKey|optSetHandler, "NewConsumer")
	if err != nil {
		return nil, err
	}
	core, err := consume.NewInbox(in, consume.Handler[*kgo.Record](h), &g.cfg.Config)
	if err != nil {
		return nil, err
	}
	c := &Consumer{g: g, h: h, core: core}
	if err := g.start(kopts, c.process); err != nil {
		return nil, err
	}
	return c, nil
}

// Client returns the franz-go client the Consumer owns, for producing and
// admin requests. Do not poll, commit or close it.
func (c *Consumer) Client() *kgo.Client { return c.g.cl }

// Run polls, processes and marks records until ctx ends (returning ctx's
// error), Close is called (an error wrapping idem.ErrClosed), or a record
// can neither be applied nor dead-lettered (an error; its offset is not
// committed). Run may be called once; after it returns, Close the Consumer
// and build a new one to resume from the committed offsets.
//
// For each partition of a poll, the records' effects commit first (one
// transaction), failed records are retried and dead-lettered, and only then
// is the partition's offset marked; marks are committed by franz-go's
// autocommit, on revoke and on Close. What happens if the process dies:
//   - before the effects commit: nothing is recorded; the records are
//     consumed again from the last committed offset.
//   - after the effects commit, before the offset commit: the records are
//     consumed again; the inbox reports them as duplicates and the effect is
//     not repeated.
//   - after the offset commit: the records are not consumed again.
func (c *Consumer) Run(ctx context.Context) error { return c.g.run(ctx) }

// Close stops Run (waiting for it to return), commits the marked offsets
// while leaving the group, and closes the client. Offsets of records whose
// effects did not commit are never marked, so they are consumed again by
// the next member.
func (c *Consumer) Close() { c.g.close() }
