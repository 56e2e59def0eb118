package idemnats

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/inbox"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Handler applies one message inside the inbox transaction tx. Do all
// database work through tx: it commits with the message's key or not at all.
// Return an error wrapped with [idem.Permanent] when a redelivery cannot
// succeed (the message is dead-lettered at once); any other error rolls
// this message back and it is redelivered later.
type Handler func(ctx context.Context, tx *sql.Tx, msg jetstream.Msg) error

// SetHandler applies several messages at once inside the inbox transaction
// tx, typically with set-based statements (one multi-row INSERT or UPDATE
// for all of them); see [WithSetHandler]. msgs holds, in delivery order,
// exactly the messages of one group whose keys this transaction recorded:
// duplicates are left out, and msgs is never empty. Do all database work
// through tx; f may run again for the same messages (a retried
// transaction), only one run's effect committing. Aggregate per target row
// before a set-based UPDATE (an UPDATE … FROM a list naming one row twice
// changes it once). Do not ack the messages or keep msgs after returning:
// the Consumer acks them after the commit.
type SetHandler func(ctx context.Context, tx *sql.Tx, msgs []jetstream.Msg) error

// Outcome is how the Consumer settled one message.
type Outcome int

const (
	// Applied: the key and the effect committed; the message was acked.
	Applied Outcome = iota + 1
	// Duplicate: the key was already recorded; nothing ran; acked.
	Duplicate
	// Retried: the handler (or the transaction) failed; nak'd with a delay.
	Retried
	// DeadLettered: republished to the dead letter (if configured) and
	// terminated.
	DeadLettered
)

func (o Outcome) String() string {
	switch o {
	case Applied:
		return "applied"
	case Duplicate:
		return "duplicate"
	case Retried:
		return "retried"
	case DeadLettered:
		return "dead-lettered"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Reasons a message is dead-lettered, in the Idem-Reason header.
const (
	ReasonPermanent   = "permanent"       // the handler returned idem.Permanent(err)
	ReasonMaxDeliver  = "max-deliveries"  // still failing at WithMaxDeliveries
	ReasonNoKey       = "no-key"          // no usable key (missing Nats-Msg-Id)
	ReasonFingerprint = "fingerprint"     // key reused with another payload
	ReasonNoMetadata  = "no-jetstream-md" // not a JetStream delivery
)

// Event reports one settled message to [WithObserver].
type Event struct {
	Msg     jetstream.Msg
	Key     string
	Outcome Outcome
	Reason  string // for DeadLettered
	Err     error  // the handler's or transaction's error, if any
}

// Consumer runs a pull consumer's messages through an inbox: each fetched
// batch is applied in one transaction ([inbox.Inbox.ProcessBatch]) and each
// message is acked only after that transaction committed.
type Consumer struct {
	cons    jetstream.Consumer
	in      *inbox.Inbox
	handler Handler
	cfg     config

	afterCommit func() // test hook: runs between the commit and the acks
}

// NewConsumer returns a Consumer that fetches from cons (a pull consumer
// with AckExplicit, the default), applies each message with handler through
// in, and acks it after the commit. With [WithSetHandler], handler is the
// per-message fallback of the set handler and may be nil.
func NewConsumer(cons jetstream.Consumer, in *inbox.Inbox, handler Handler, opts ...Option) (*Consumer, error) {
	if cons == nil || in == nil {
		return nil, fmt.Errorf("idemnats: %w: nil consumer or inbox", idem.ErrInvalidOption)
	}
	cfg := defaultConfig(forConsumer)
	for _, o := range opts {
		if o == nil {
			return nil, invalid("nil option")
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if handler == nil && cfg.set == nil {
		return nil, fmt.Errorf("idemnats: %w: nil handler (and no WithSetHandler)", idem.ErrInvalidOption)
	}
	return &Consumer{cons: cons, in: in, handler: handler, cfg: cfg}, nil
}

// ErrClosed is returned by Run when the NATS connection is closed (not
// merely reconnecting): nothing more can be fetched or acked on it.
var ErrClosed = errors.New("idemnats: connection closed")

// Run pulls and processes messages until ctx is done or the connection is
// closed. It returns ctx's error (wrapped) or an error wrapping [ErrClosed].
// While the connection is reconnecting, Run waits (the pull is renewed
// after the reconnect) and resumes when the server is back; no message is
// acked unless its transaction committed. The pull's goroutines are stopped
// before Run returns. Several goroutines may call Run on one Consumer to
// process batches in parallel.
//
// Messages are processed in groups: the first message that arrives, and
// every further one that arrives within the linger (see [WithLinger]), up to
// the batch size, commit in one transaction, and are then acked one by one.
//
// If the process dies:
//   - before the commit: nothing is recorded; the messages are redelivered
//     after the consumer's AckWait and processed.
//   - after the commit, before the ack: the redelivery finds the key;
//     it is acked as a Duplicate and the effect is not repeated.
//   - after the ack: done.
func (c *Consumer) Run(ctx context.Context) error {
	it, err := c.cons.Messages(jetstream.PullMaxMessages(2*c.cfg.batch), jetstream.PullExpiry(c.cfg.maxWait))
	if err != nil {
		return fmt.Errorf("idemnats: %w", err)
	}
	defer it.Stop()
	group := make([]jetstream.Msg, 0, c.cfg.batch)
	failures := 0
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err == nil {
			group = append(group[:0], m)
			for len(group) < c.cfg.batch {
				m, err := it.Next(jetstream.NextMaxWait(c.cfg.linger))
				if err != nil {
					break // nothing more yet; an error shows again on the next blocking Next
				}
				group = append(group, m)
			}
			err = c.process(ctx, group)
		}
		switch {
		case err == nil:
			failures = 0
			continue
		case ctx.Err() != nil:
			return fmt.Errorf("idemnats: %w", ctx.Err())
		case isClosed(err):
			return fmt.Errorf("%w: %w", ErrClosed, err)
		case errors.Is(err, jetstream.ErrMsgIteratorClosed):
			return fmt.Errorf("idemnats: pull stopped: %w", err)
		}
		failures++
		d := backoff(uint64(failures), 50*time.Millisecond, 2*time.Second)
		c.cfg.logger.Warn("idemnats: pull failed; retrying", "err", err, "in", d)
		if err := sleep(ctx, d); err != nil {
			return fmt.Errorf("idemnats: %w", err)
		}
	}
}

func isClosed(err error) bool {
	return errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, jetstream.ErrConnectionClosed)
}

// delivery is one message of a group on its way through the inbox.
type delivery struct {
	msg  jetstream.Msg
	meta *jetstream.MsgMetadata
}

// process applies one group in one transaction and settles every message.
// It returns an error only when Run should stop or back off (the connection
// failed): messages it could not settle are redelivered by the server.
func (c *Consumer) process(ctx context.Context, msgs []jetstream.Msg) error {
	items := make([]inbox.Message, 0, len(msgs))
	for _, m := range msgs {
		meta, err := m.Metadata()
		if err != nil {
			if err := c.deadLetter(ctx, m, nil, "", ReasonNoMetadata, err); err != nil {
				return err
			}
			continue
		}
		key, err := c.cfg.key(m)
		if err == nil {
			err = idem.ValidateKey(key)
		}
		if err != nil {
			if err := c.deadLetter(ctx, m, meta, key, ReasonNoKey, err); err != nil {
				return err
			}
			continue
		}
		im := inbox.Message{Key: key, Value: delivery{msg: m, meta: meta}}
		if c.cfg.fingerprint != nil {
			im.Fingerprint = c.cfg.fingerprint(m)
			if len(im.Fingerprint) > inbox.MaxFingerprintLen {
				err := fmt.Errorf("idemnats: fingerprint of %d bytes is longer than %d", len(im.Fingerprint), inbox.MaxFingerprintLen)
				if err := c.deadLetter(ctx, m, meta, key, ReasonFingerprint, err); err != nil {
					return err
				}
				continue
			}
		}
		items = append(items, im)
	}
	if len(items) == 0 {
		return nil
	}
	results, err := c.apply(ctx, items)
	if err != nil {
		// Nothing committed, or the commit's outcome is unknown: ack none.
		// Shutting down: leave them to AckWait (a nak could race the
		// closing connection and means the same).
		if ctx.Err() != nil {
			return ctx.Err()
		}
		c.cfg.logger.Warn("idemnats: batch failed; redelivering", "messages", len(items), "err", err)
		for _, im := range items {
			d := im.Value.(delivery)
			if err := c.retry(d, im.Key, err); err != nil {
				return err
			}
		}
		return nil
	}
	if c.afterCommit != nil {
		c.afterCommit()
	}
	for i, r := range results {
		d := items[i].Value.(delivery)
		if err := c.settle(ctx, d, r); err != nil {
			return err
		}
	}
	return nil
}

// apply runs one group through the inbox in one transaction: per message
// with the Handler, or with the set handler (the Handler, if any, as its
// per-message fallback).
func (c *Consumer) apply(ctx context.Context, items []inbox.Message) ([]inbox.Result, error) {
	var each inbox.BatchHandler
	if c.handler != nil {
		each = func(ctx context.Context, tx *sql.Tx, im inbox.Message) error {
			return c.handler(ctx, tx, im.Value.(delivery).msg)
		}
	}
	if c.cfg.set == nil {
		return c.in.ProcessBatch(ctx, items, each)
	}
	return c.in.ProcessBatchSet(ctx, items, func(ctx context.Context, tx *sql.Tx, fresh []inbox.Message) error {
		msgs := make([]jetstream.Msg, len(fresh))
		for i, im := range fresh {
			msgs[i] = im.Value.(delivery).msg
		}
		return c.cfg.set(ctx, tx, msgs)
	}, each)
}

// settle acks, naks or dead-letters one message after the commit.
func (c *Consumer) settle(ctx context.Context, d delivery, r inbox.Result) error {
	switch {
	case r.Err == nil:
		var err error
		if c.cfg.doubleAck {
			err = d.msg.DoubleAck(ctx)
		} else {
			err = d.msg.Ack()
		}
		if err != nil {
			return fmt.Errorf("idemnats: ack %s: %w", r.Key, err)
		}
		o := Duplicate
		if r.Applied {
			o = Applied
		}
		c.observe(Event{Msg: d.msg, Key: r.Key, Outcome: o})
		return nil
	case errors.Is(r.Err, idem.ErrFingerprintMismatch):
		return c.deadLetter(ctx, d.msg, d.meta, r.Key, ReasonFingerprint, r.Err)
	case idem.IsPermanent(r.Err):
		return c.deadLetter(ctx, d.msg, d.meta, r.Key, ReasonPermanent, r.Err)
	case d.meta.NumDelivered >= c.cfg.maxDeliveries:
		return c.deadLetter(ctx, d.msg, d.meta, r.Key, ReasonMaxDeliver, r.Err)
	}
	return c.retry(d, r.Key, r.Err)
}

func (c *Consumer) retry(d delivery, key string, cause error) error {
	delay := backoff(d.meta.NumDelivered, c.cfg.retryMin, c.cfg.retryMax)
	if err := d.msg.NakWithDelay(delay); err != nil {
		return fmt.Errorf("idemnats: nak %s: %w", key, err)
	}
	c.cfg.logger.Info("idemnats: message failed; redelivering", "key", key, "delivery", d.meta.NumDelivered, "in", delay, "err", cause)
	c.observe(Event{Msg: d.msg, Key: key, Outcome: Retried, Err: cause})
	return nil
}

func (c *Consumer) observe(e Event) {
	if c.cfg.observer != nil {
		c.cfg.observer(e)
	}
}

// backoff is lo·2^(n-1), at most hi.
func backoff(n uint64, lo, hi time.Duration) time.Duration {
	d := lo
	for i := uint64(1); i < n && d < hi; i++ {
		d *= 2
	}
	return min(d, hi)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
