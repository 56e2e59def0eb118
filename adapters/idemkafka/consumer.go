package idemkafka

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/sqldialect"
)

// Handler applies one record's effect inside tx. It must do all its database
// work through tx: the dedup key (or, in offsets-in-database mode, the
// consumed offset) commits in the same transaction. It may run more than once
// for one record (a retry after an error, a batch replayed one message at a
// time); only one run's effect ever commits.
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

// Errors callers branch on.
var (
	// ErrClosed is returned by Run after Close, or when Run is called twice.
	ErrClosed = errors.New("idemkafka: consumer closed")
	// ErrDeadLetter is wrapped when a record had to be dead-lettered and
	// could not be: no dead-letter topic is configured, or producing to it
	// failed. The record's offset is not committed.
	ErrDeadLetter = errors.New("idemkafka: record not dead-lettered")
)

// Consumer is a consume loop over a Kafka consumer group that applies each
// record through an inbox (or, built by NewOffsetConsumer, with its offset
// in the database) and only then marks its offset for commit.
type Consumer struct {
	cl    *kgo.Client
	in    *inbox.Inbox
	h     Handler
	cfg   config
	group string
	// ready is closed once cl and group are set: franz-go may call the
	// group callbacks from inside kgo.NewClient's goroutines before that.
	ready chan struct{}

	// offsets-in-database mode
	db *sql.DB
	d  sqldialect.Dialect

	// keystore mode
	ks     keystore.Store
	kh     KeystoreHandler
	doOpts []keystore.Option

	mu      sync.Mutex
	started bool
	closed  bool
	cancel  context.CancelFunc
	done    chan struct{}
}

// NewConsumer builds a Consumer whose records are deduplicated by in: each
// record's key (by default the HeaderID header; see WithKeyHeader,
// WithKeyFunc, WithOffsetKey) and h's effect commit in one transaction, one
// transaction per polled batch of a partition (inbox.ProcessBatch; with
// WithSetHandler, inbox.ProcessBatchSet, and h may then be nil).
//
// kopts configure the franz-go client, which the Consumer owns and closes:
// they must name the group (kgo.ConsumerGroup) and the topics. NewConsumer adds
// kgo.BlockRebalanceOnPoll, kgo.AutoCommitMarks and its own
// OnPartitionsRevoked and OnPartitionsLost, replacing any given in kopts.
// Name in's consumer after the group: keys are scoped by it.
func NewConsumer(in *inbox.Inbox, h Handler, kopts []kgo.Opt, opts ...Option) (*Consumer, error) {
	if in == nil {
		return nil, invalid("nil inbox")
	}
	return newConsumer(&Consumer{in: in, h: h}, kopts, opts)
}

// NewOffsetConsumer builds a Consumer in offsets-in-database mode: the next
// offset to consume of each partition is kept in a table of db
// (DefaultOffsetsTable: group_id, topic, partition_id, next_offset), written
// in the same transaction as h's effect, and the consumer seeks to it whenever
// a partition is assigned. That is exactly-once from Kafka into the database
// without a key per record, as long as every effect of h is in db. Commits to
// Kafka still happen (for lag monitoring) but are never read back.
//
// The offset update is conditional (the stored offset must not be past the
// batch), so a member that lost its partitions without knowing (a zombie)
// cannot commit a batch that the new owner has already applied: it rolls back
// and re-seeks. Supported dialects: PostgreSQL and SQLite. Call
// Consumer.Migrate, or apply OffsetsSchemaSQL, before Run.
func NewOffsetConsumer(db *sql.DB, d sqldialect.Dialect, h Handler, kopts []kgo.Opt, opts ...Option) (*Consumer, error) {
	if db == nil {
		return nil, invalid("nil db")
	}
	if d != sqldialect.Postgres && d != sqldialect.SQLite {
		return nil, invalid("offsets-in-database mode supports PostgreSQL and SQLite, not %v", d)
	}
	if h == nil {
		return nil, invalid("nil handler")
	}
	return newConsumer(&Consumer{db: db, d: d, h: h}, kopts, opts)
}

// KeystoreHandler applies one record's effect outside any database
// transaction (an email, a call to a payment API).
type KeystoreHandler func(ctx context.Context, r *kgo.Record) error

// NewKeystoreConsumer builds a Consumer for effects that cannot share a
// transaction with the key: each record runs through keystore.Do (reserve the
// key in progress, run h, complete the key; release it when h fails), one
// record at a time, before its offset is marked. doOpts (lease, TTL, waiting)
// are passed to keystore.Do; the lease must exceed h's worst case. Scope s by
// group (keystore.Scope).
//
// If the process dies after h's effect and before the key is completed, the
// key stays in progress until its lease expires and the re-consumed record
// then runs h again: pass the key downstream (keystore.ClaimFrom gives the
// fencing token too) so that the repeat is absorbed there. A record whose key
// is held in progress by another member is retried until that lease ends.
func NewKeystoreConsumer(s keystore.Store, h KeystoreHandler, kopts []kgo.Opt, doOpts []keystore.Option, opts ...Option) (*Consumer, error) {
	if s == nil {
		return nil, invalid("nil store")
	}
	if h == nil {
		return nil, invalid("nil handler")
	}
	for _, o := range doOpts {
		if o == nil {
			return nil, invalid("nil keystore option")
		}
	}
	return newConsumer(&Consumer{ks: s, kh: h, doOpts: doOpts}, kopts, opts)
}

func newConsumer(c *Consumer, kopts []kgo.Opt, opts []Option) (*Consumer, error) {
	c.cfg, c.ready = defaultConfig(), make(chan struct{})
	db := c.db
	for _, o := range opts {
		if o == nil {
			return nil, invalid("nil option")
		}
		if err := o(&c.cfg); err != nil {
			return nil, err
		}
	}
	switch {
	case c.cfg.set != nil && c.in == nil:
		return nil, invalid("WithSetHandler applies to inbox mode (NewConsumer) only")
	case c.in != nil && c.h == nil && c.cfg.set == nil:
		return nil, invalid("nil handler")
	}
	all := append(append([]kgo.Opt(nil), kopts...),
		kgo.BlockRebalanceOnPoll(),
		kgo.AutoCommitMarks(),
		kgo.OnPartitionsRevoked(c.onRevoked),
		kgo.OnPartitionsLost(c.onLost),
	)
	if db != nil {
		all = append(all, kgo.AdjustFetchOffsetsFn(c.adjustOffsets))
	}
	cl, err := kgo.NewClient(all...)
	if err != nil {
		return nil, fmt.Errorf("idemkafka: client: %w: %w", idem.ErrInvalidOption, err)
	}
	group, _ := cl.OptValue(kgo.ConsumerGroup).(string)
	if group == "" {
		cl.Close()
		return nil, invalid("kopts must set kgo.ConsumerGroup")
	}
	c.cl, c.group = cl, group
	close(c.ready)
	return c, nil
}

// Client returns the franz-go client the Consumer owns, for producing and
// admin requests. Do not poll, commit or close it.
func (c *Consumer) Client() *kgo.Client { return c.cl }

// Run polls, processes and marks records until ctx ends (returning ctx's
// error), Close is called (ErrClosed), or a record can neither be applied nor
// dead-lettered (an error; its offset is not committed). Run may be called
// once; after it returns, Close the Consumer and build a new one to resume
// from the committed offsets.
//
// For each partition of a poll, the records' effects commit first (one
// transaction), failed records are retried and dead-lettered, and only then is
// the partition's offset marked; marks are committed by franz-go's
// autocommit, on revoke and on Close. What happens if the process dies:
//   - before the effects commit: nothing is recorded; the records are
//     consumed again from the last committed offset.
//   - after the effects commit, before the offset commit: the records are
//     consumed again; the inbox reports them as duplicates (in offsets mode,
//     the consumer seeks past them; in keystore mode, they are replays) and
//     the effect is not repeated.
//   - after the offset commit: the records are not consumed again.
func (c *Consumer) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.closed || c.started {
		c.mu.Unlock()
		return ErrClosed
	}
	c.started = true
	ctx, cancel := context.WithCancel(ctx)
	c.cancel, c.done = cancel, make(chan struct{})
	c.mu.Unlock()
	defer close(c.done)
	defer cancel()
	for {
		fetches := c.cl.PollRecords(ctx, c.cfg.maxPoll)
		if fetches.IsClientClosed() {
			return ErrClosed
		}
		err := c.processFetches(ctx, fetches)
		c.cl.AllowRebalance()
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

func (c *Consumer) processFetches(ctx context.Context, fetches kgo.Fetches) error {
	fetches.EachError(func(topic string, p int32, err error) {
		if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			c.cfg.log.Warn("idemkafka: fetch error", "topic", topic, "partition", p, "err", err)
		}
	})
	var err error
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		if err != nil || len(p.Records) == 0 {
			return
		}
		mark := true
		switch {
		case c.db != nil:
			mark, err = c.processOffsets(ctx, p.Records)
		case c.ks != nil:
			err = c.processKeystore(ctx, p.Records)
		default:
			err = c.processInbox(ctx, p.Records)
		}
		if err == nil && mark {
			c.cl.MarkCommitRecords(p.Records[len(p.Records)-1])
		}
	})
	return err
}

// Close stops Run (waiting for it to return), commits the marked offsets while
// leaving the group, and closes the client. Offsets of records whose effects
// did not commit are never marked, so they are consumed again by the next
// member.
func (c *Consumer) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	cancel, done := c.cancel, c.done
	c.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	c.cl.CloseAllowingRebalance()
}

// onRevoked runs between polls (BlockRebalanceOnPoll): no record of a revoked
// partition is being processed, and every mark belongs to a committed effect.
func (c *Consumer) onRevoked(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
	if err := cl.CommitMarkedOffsets(ctx); err != nil {
		c.cfg.log.Warn("idemkafka: commit on revoke failed; the new owner will see duplicates", "err", err, "revoked", revoked)
	}
}

// onLost: the partitions may already belong to another member, so committing
// could move its offsets; the marks are dropped and the new owner re-reads
// from the last commit (the inbox absorbs the duplicates).
func (c *Consumer) onLost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	c.cfg.log.Warn("idemkafka: partitions lost", "lost", lost)
}

func (c *Consumer) outcome(r *kgo.Record, o Outcome, err error) {
	if c.cfg.onOutcome != nil {
		c.cfg.onOutcome(r, o, err)
	}
}
