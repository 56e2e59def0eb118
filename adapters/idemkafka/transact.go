package idemkafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/internal/consume"
)

// TransactHandler turns one consumed record into the records to produce
// (zero, one or many; each names its Topic, or the client has a
// kgo.DefaultProduceTopic). It must not produce by itself, and it must not
// have effects outside Kafka: it may run several times for one record (a
// retry after an error, a batch consumed again after an abort), and only the
// records it returned in the run whose transaction committed are ever
// visible to read_committed consumers. Return new records; never return r
// itself or keep it after returning.
type TransactHandler func(ctx context.Context, r *kgo.Record) ([]*kgo.Record, error)

// ErrFenced is wrapped by the error of a TransactConsumer whose
// transactional id was taken over by a newer instance (kerr.ProducerFenced
// or kerr.InvalidProducerEpoch from the broker): this instance is a zombie,
// its open transaction has been aborted, and it must stop.
var ErrFenced = errors.New("idemkafka: transactional id fenced by a newer instance")

// DefaultEndTimeout bounds the End of one transaction (flush, offset commit,
// EndTxn). It runs on a context that Run's cancellation does not reach,
// because franz-go leaves a session whose End was canceled in an unknown
// state.
const DefaultEndTimeout = 30 * time.Second

// TransactConsumer is a read-process-write loop whose only effects are
// records produced to Kafka. Each poll runs in one Kafka transaction
// (kgo.GroupTransactSession): the records its handler returns and the
// consumed offsets commit together, or neither does. Consumers of the output
// topics that read with kgo.FetchIsolationLevel(kgo.ReadCommitted()) see
// each output record exactly once, whatever crashes, rebalances or zombie
// instances happen upstream.
//
// # What it does not cover
//
// Kafka transactions cover Kafka only. A handler that writes to a database,
// calls an API or sends an email cannot be made atomic with the transaction:
// if the process dies after the external effect and before the commit, the
// batch is consumed again and the effect happens again, and an aborted
// transaction does not undo it. For such consumers use the [Consumer] (inbox
// or offsets in the database) and either
//   - an outbox: write the effect and the outgoing message in one database
//     transaction, and relay the outbox to Kafka ([Producer.OutboxPublisher]);
//     or
//   - produce from the inbox handler with ids that do not change between
//     runs ([OutputID]), so that a downstream [Consumer] deduplicates the
//     copies that a rerun produces.
//
// Outputs are visible exactly once only to read_committed readers: a
// read_uncommitted reader (franz-go's default) also sees the records of
// aborted transactions.
//
// # Transactional ids and zombies
//
// The transactional id identifies one instance of the application and must
// stay the same across its restarts (a pod name of a StatefulSet, a slot
// number), and differ between instances running at the same time. When an
// instance starts, the broker bumps the id's epoch and aborts whatever
// transaction the id still had open: a restarted instance does not wait for
// its crashed predecessor's transaction to time out. An older process still
// running with the same id (a zombie, paused past its session timeout) is
// fenced: its produce and commit fail, Run returns an error wrapping
// [ErrFenced], and nothing it produced becomes visible. With KIP-447
// (Kafka 2.5+, and kfake), whose stable fetch offsets franz-go always
// requires, a member that takes over a partition waits
// until the transaction that committed its offsets has ended, so ids need not
// be tied to partitions.
//
// # Goroutines
//
// A TransactConsumer owns its franz-go client. Run runs in the caller's
// goroutine; Close stops it and closes the client.
type TransactConsumer struct {
	loop
	s     *kgo.GroupTransactSession
	h     TransactHandler
	cfg   config
	group string
	txnID string
}

// NewTransactional builds a TransactConsumer for the instance named
// transactionalID (see TransactConsumer for how to choose it; it must be a
// valid idem key without leading or trailing spaces). kopts configure the
// franz-go client, which the TransactConsumer owns: they must name the group
// (kgo.ConsumerGroup) and the input topics. NewTransactional adds
// kgo.TransactionalID(transactionalID) and read_committed fetching (so that
// inputs written by other transactions are read once too), replacing any
// given in kopts; franz-go always requires stable fetch offsets (KIP-447).
// Set kgo.TransactionTimeout in kopts if needed (Kafka's default, 40 s in
// franz-go, bounds how long a crashed instance's open transaction can block
// a new owner when the crashed instance does not come back).
//
// The options that apply: WithMaxAttempts, WithBackoff, WithDeadLetter,
// WithBatchSize, WithLogger and WithObserver; the key, fingerprint,
// missing-key, offsets-table, set-handler and keystore options do not
// (nothing is deduplicated by key here), and giving one is an error wrapping
// idem.ErrInvalidOption.
func NewTransactional(transactionalID string, h TransactHandler, kopts []kgo.Opt, opts ...Option) (*TransactConsumer, error) {
	if err := idem.ValidateKey(transactionalID); err != nil {
		return nil, fmt.Errorf("idemkafka: transactional id: %w: %w", idem.ErrInvalidOption, err)
	}
	if strings.TrimSpace(transactionalID) != transactionalID {
		return nil, invalid("transactional id %q has leading or trailing spaces", transactionalID)
	}
	if h == nil {
		return nil, invalid("nil handler")
	}
	cfg, err := newConfig(opts, 0, "NewTransactional")
	if err != nil {
		return nil, err
	}
	all := append(append([]kgo.Opt(nil), kopts...),
		kgo.TransactionalID(transactionalID),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
	s, err := kgo.NewGroupTransactSession(all...)
	if err != nil {
		return nil, clientError(all, err)
	}
	group, _ := s.Client().OptValue(kgo.ConsumerGroup).(string)
	c := &TransactConsumer{s: s, h: h, cfg: cfg, group: group, txnID: transactionalID}
	c.loop = loop{p: s, closeCl: s.Close, batch: cfg.BatchSize, log: cfg.Logger, process: c.transact}
	return c, nil
}

// Client returns the franz-go client the TransactConsumer owns, for admin
// requests. Do not produce, poll, commit or close it.
func (c *TransactConsumer) Client() *kgo.Client { return c.s.Client() }

// TransactionalID returns the id the consumer was built with.
func (c *TransactConsumer) TransactionalID() string { return c.txnID }

// Run consumes until ctx ends (returning ctx's error), Close is called
// (an error wrapping idem.ErrClosed), or a transaction cannot be completed (an error; Close the
// consumer and build a new one, with the same transactional id, to resume
// from the committed offsets). Run may be called once.
//
// Each non-empty poll is one transaction: Begin; the handler runs for every
// record in log order and its records are produced; End commits the
// produced records and the polled offsets together. A handler error is
// retried for that record with the WithBackoff delays, inside the open
// transaction; when its WithMaxAttempts runs are spent (at once for
// idem.Permanent errors) the record goes to the dead-letter topic in the
// same transaction, with the usual HeaderDLQ* headers and reason
// ReasonMaxAttempts or ReasonPermanent. Without a dead-letter topic the
// transaction is aborted and Run returns an error wrapping ErrDeadLetter.
// WithObserver reports Applied and DeadLettered only after the transaction
// committed.
//
// What happens if the process dies, or the group rebalances:
//   - before End commits (while the handler runs, after records were
//     produced, during the offset commit): the transaction is never
//     committed; the broker aborts it when this instance's transactional id
//     starts again or the transaction times out. Its records stay invisible
//     to read_committed readers, and the batch is consumed again from the
//     last committed offsets, by this instance or the partition's next
//     owner.
//   - a rebalance that revokes partitions before End: End aborts instead of
//     committing, the session rewinds to the committed offsets, and Run
//     goes on polling; the batch is processed again, by whoever owns it now.
//   - after End committed: outputs and offsets are both committed; nothing
//     is consumed again.
func (c *TransactConsumer) Run(ctx context.Context) error { return c.run(ctx) }

// transact runs one poll as one transaction, traced as one batch.
func (c *TransactConsumer) transact(ctx context.Context, fetches kgo.Fetches) (err error) {
	ctx, batch := c.cfg.StartBatch(ctx, fetches.NumRecords())
	defer func() { batch.End(ctx, err) }()
	if err := c.s.Begin(); err != nil {
		return c.wrap("begin transaction", err)
	}
	endCtx, cancelEnd := context.WithTimeout(context.WithoutCancel(ctx), DefaultEndTimeout)
	defer cancelEnd()

	var mu sync.Mutex
	var produceErr error
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			mu.Lock()
			if produceErr == nil {
				produceErr = err
			}
			mu.Unlock()
		}
	}
	settled := make([]settledRecord, 0, fetches.NumRecords()) // reported once committed
	defer func() {
		for i := range settled {
			c.cfg.Unsettled(&settled[i].d, err) // not committed: consumed again
		}
	}()
	fetches.EachRecord(func(r *kgo.Record) {
		if err != nil {
			return
		}
		var recs []*kgo.Record
		var sr settledRecord
		recs, sr, err = c.handle(ctx, r)
		if err != nil {
			return
		}
		for _, out := range recs {
			c.s.Produce(ctx, out, promise)
		}
		settled = append(settled, sr)
	})
	if err == nil {
		// Flush here, not only in End, to learn of a failed record before
		// asking to commit.
		if ferr := c.s.Client().Flush(endCtx); ferr != nil {
			err = fmt.Errorf("idemkafka: flush: %w", ferr)
		}
		mu.Lock()
		if err == nil && produceErr != nil {
			err = c.wrap("produce", produceErr)
		}
		mu.Unlock()
	}
	if err != nil {
		if _, aerr := c.s.End(endCtx, kgo.TryAbort); aerr != nil {
			c.cfg.Logger.Warn("idemkafka: abort failed", "txn", c.txnID, "err", aerr)
		}
		return err
	}
	committed, err := c.s.End(endCtx, kgo.TryCommit)
	if err != nil {
		return c.wrap("end transaction", err)
	}
	if !committed {
		c.cfg.Logger.Info("idemkafka: transaction aborted by a rebalance; the batch is consumed again",
			"txn", c.txnID, "records", fetches.NumRecords())
		for i := range settled {
			c.cfg.Unsettled(&settled[i].d, errAborted)
		}
		return nil
	}
	for i := range settled {
		c.cfg.Report(&settled[i].d, settled[i].dec)
		batch.Count(settled[i].dec)
	}
	return nil
}

// errAborted ends the spans of a transaction that a rebalance aborted.
var errAborted = errors.New("idemkafka: transaction aborted by a rebalance")

// settledRecord is a record's final decision, reported once its
// transaction committed.
type settledRecord struct {
	d   delivery
	dec consume.Decision
}

// handle runs the handler for r with retries and returns the records to
// produce: the handler's, or r's dead-letter copy. An error aborts the
// transaction.
func (c *TransactConsumer) handle(ctx context.Context, r *kgo.Record) (_ []*kgo.Record, _ settledRecord, err error) {
	d := delivery{Msg: r, Attempt: 1}
	defer func() {
		if err != nil {
			c.cfg.Unsettled(&d, err)
		}
	}()
	for {
		recs, err := c.h(c.cfg.Start(ctx, &d), r)
		if err == nil {
			err = c.checkTopics(recs)
		}
		if err == nil {
			return recs, settledRecord{d, consume.Decision{Outcome: idem.Applied}}, nil
		}
		if cerr := ctx.Err(); cerr != nil {
			return nil, settledRecord{}, cerr
		}
		dec := c.cfg.Decide(&d, true, err)
		switch {
		case dec.Outcome == idem.Retried:
			if err := c.cfg.rerun(ctx, &d, dec); err != nil {
				return nil, settledRecord{}, err
			}
			continue
		case c.cfg.dlq == "":
			return nil, settledRecord{}, fmt.Errorf("idemkafka: %s (%s): no dead-letter topic; transaction aborted: %w: %w", where(r), dec.Reason, ErrDeadLetter, err)
		}
		return []*kgo.Record{deadLetterRecord(c.cfg.dlq, c.group, r, dec.Reason, d.Attempt, err)}, settledRecord{d, dec}, nil
	}
}

// checkTopics refuses output records without a topic when the client has no
// default topic: a permanent handler error, since a retry returns the same.
func (c *TransactConsumer) checkTopics(recs []*kgo.Record) error {
	def, _ := c.s.Client().OptValue(kgo.DefaultProduceTopic).(string)
	for i, r := range recs {
		switch {
		case r == nil:
			return idem.Permanent(fmt.Errorf("idemkafka: output record %d is nil", i))
		case r.Topic == "" && def == "":
			return idem.Permanent(fmt.Errorf("idemkafka: output record %d has no topic", i))
		}
	}
	return nil
}

// wrap prefixes err and marks a fenced producer with ErrFenced.
func (c *TransactConsumer) wrap(what string, err error) error {
	if errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) {
		return fmt.Errorf("idemkafka: %s (transactional id %q): %w: %w", what, c.txnID, ErrFenced, err)
	}
	return fmt.Errorf("idemkafka: %s (transactional id %q): %w", what, c.txnID, err)
}

// Close stops Run (waiting for it to return; a transaction it was ending is
// ended first), leaves the group and closes the client. A transaction that
// was still open is aborted by the broker, at the latest when the same
// transactional id starts again.
func (c *TransactConsumer) Close() { c.close() }

// OutputID returns a stable id for the n-th record that a handler scoped by
// scope (its consumer group, say) produces for input r: derived from r's
// HeaderID if it has one, else from r's topic, partition and offset. Every
// run of the handler for one input gives the same ids, so stamping them
// (SetID) lets a downstream [Consumer] apply each output once
// although a rerun produced it again. That is the shape for a handler with
// an effect outside Kafka, which a [TransactConsumer] cannot cover: apply
// the effect through an inbox, and produce with these ids.
func OutputID(scope string, r *kgo.Record, n int) (string, error) {
	if r == nil {
		return "", invalid("nil record")
	}
	if id, err := HeaderKey(HeaderID)(r); err == nil {
		return idem.DeriveKey("idemkafka.output", scope, "id", id, strconv.Itoa(n))
	}
	return idem.DeriveKey("idemkafka.output", scope, "offset", r.Topic,
		strconv.Itoa(int(r.Partition)), strconv.FormatInt(r.Offset, 10), strconv.Itoa(n))
}
