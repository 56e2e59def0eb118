package idemamqp

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/inbox"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Handler applies one delivery inside the inbox transaction tx. Do all
// database work through tx. Return an error wrapped with [idem.Permanent]
// when a retry cannot succeed (the delivery is dead-lettered at once); any
// other error rolls this delivery back and it is retried.
type Handler func(ctx context.Context, tx *sql.Tx, d amqp.Delivery) error

// SetHandler applies several deliveries at once inside the inbox
// transaction tx, typically with set-based statements (one multi-row INSERT
// or UPDATE for all of them); see [WithSetHandler]. ds holds, in delivery
// order, exactly the deliveries of one group whose keys this transaction
// recorded: duplicates are left out, and ds is never empty. Do all database
// work through tx; f may run again for the same deliveries (a retried
// transaction), only one run's effect committing. Aggregate per target row
// before a set-based UPDATE (an UPDATE … FROM a list naming one row twice
// changes it once). Do not ack the deliveries or keep ds after returning:
// the Consumer acks them after the commit.
type SetHandler func(ctx context.Context, tx *sql.Tx, ds []amqp.Delivery) error

// Outcome is how the Consumer settled one delivery.
type Outcome int

const (
	// Applied: the key and the effect committed; acked.
	Applied Outcome = iota + 1
	// Duplicate: the key was already recorded; nothing ran; acked.
	Duplicate
	// Retried: the handler failed; requeued with x-idem-attempts + 1 (or,
	// when the transaction failed, nacked with requeue).
	Retried
	// DeadLettered: published to the dead letter and acked, or nacked
	// without requeue to the queue's own dead-letter exchange.
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

// Reasons a delivery is dead-lettered, in the x-idem-reason header.
const (
	ReasonPermanent   = "permanent"    // the handler returned idem.Permanent(err)
	ReasonMaxAttempts = "max-attempts" // still failing at WithMaxAttempts
	ReasonNoKey       = "no-key"       // no usable key (missing message-id)
	ReasonFingerprint = "fingerprint"  // key reused with another payload
)

// Event reports one settled delivery to [WithObserver].
type Event struct {
	Delivery amqp.Delivery
	Key      string
	Outcome  Outcome
	Reason   string // for DeadLettered
	Err      error
}

// ErrClosed is returned by Run when its channel or connection is closed: the
// broker requeues every unacked delivery, and the caller must reconnect
// (amqp091-go does not) and call Run again.
var ErrClosed = errors.New("idemamqp: channel or connection closed")

// Consumer consumes a queue through an inbox: deliveries are applied in
// groups, one transaction each ([inbox.Inbox.ProcessBatch]), and acked only
// after the commit.
type Consumer struct {
	conn    *amqp.Connection
	queue   string
	in      *inbox.Inbox
	handler Handler
	cfg     config

	afterCommit func() // test hook: runs between the commit and the acks
}

// NewConsumer returns a Consumer of queue on conn. Run opens its own
// channels (one to consume, one in confirm mode to requeue and
// dead-letter) and closes them when it returns. With [WithSetHandler],
// handler is the per-delivery fallback of the set handler and may be nil.
func NewConsumer(conn *amqp.Connection, queue string, in *inbox.Inbox, handler Handler, opts ...Option) (*Consumer, error) {
	if conn == nil || in == nil || queue == "" {
		return nil, fmt.Errorf("idemamqp: %w: nil connection or inbox, or empty queue", idem.ErrInvalidOption)
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
		return nil, fmt.Errorf("idemamqp: %w: nil handler (and no WithSetHandler)", idem.ErrInvalidOption)
	}
	if cfg.batch > cfg.prefetch {
		return nil, invalid("batch size %d above prefetch %d: groups could never fill", cfg.batch, cfg.prefetch)
	}
	return &Consumer{conn: conn, queue: queue, in: in, handler: handler, cfg: cfg}, nil
}

// Run consumes until ctx is done (it returns ctx's error, wrapped) or the
// channel or connection closes (an error wrapping [ErrClosed]). Unacked
// deliveries go back to the queue when Run's channel closes. Run owns no
// goroutine that outlives it.
//
// If the process dies:
//   - before the commit: nothing is recorded; the broker requeues the
//     deliveries (Redelivered set) and they are processed.
//   - after the commit, before the ack: the redelivery finds the key and is
//     acked as a Duplicate; the effect is not repeated.
//   - after a retry's republish, before the original's ack: two copies
//     with the same message-id; the inbox applies one.
//   - after the ack: done.
func (c *Consumer) Run(ctx context.Context) error {
	ch, err := c.conn.Channel()
	if err != nil {
		return fmt.Errorf("%w: open channel: %w", ErrClosed, err)
	}
	defer ch.Close()
	pub, err := c.conn.Channel()
	if err != nil {
		return fmt.Errorf("%w: open channel: %w", ErrClosed, err)
	}
	defer pub.Close()
	if err := pub.Confirm(false); err != nil {
		return fmt.Errorf("idemamqp: confirm mode: %w", err)
	}
	if err := ch.Qos(c.cfg.prefetch, 0, false); err != nil {
		return fmt.Errorf("idemamqp: qos: %w", err)
	}
	deliveries, err := ch.Consume(c.queue, c.cfg.consumerTag, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("idemamqp: consume %s: %w", c.queue, err)
	}
	s := &session{c: c, pub: pub}
	group := make([]amqp.Delivery, 0, c.cfg.batch)
	linger := time.NewTimer(time.Hour)
	defer linger.Stop()
	for {
		var open bool
		group = group[:0]
		select {
		case <-ctx.Done():
			return fmt.Errorf("idemamqp: %w", ctx.Err())
		case d, ok := <-deliveries:
			if !ok {
				return fmt.Errorf("%w: deliveries ended", ErrClosed)
			}
			group = append(group, d)
		}
		group, open = gather(deliveries, group, c.cfg.batch, c.cfg.linger, linger)
		if err := s.process(ctx, group); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("idemamqp: %w", ctx.Err())
			}
			if errors.Is(err, amqp.ErrClosed) {
				return fmt.Errorf("%w: %w", ErrClosed, err)
			}
			return err
		}
		if !open {
			return fmt.Errorf("%w: deliveries ended", ErrClosed)
		}
	}
}

// gather adds deliveries already received, and those arriving within
// linger, to group, up to max. open is false if the channel closed.
func gather(deliveries <-chan amqp.Delivery, group []amqp.Delivery, max int, linger time.Duration, t *time.Timer) (_ []amqp.Delivery, open bool) {
	armed := false
	defer func() {
		if armed {
			t.Stop()
		}
	}()
	for len(group) < max {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return group, false
			}
			group = append(group, d)
			continue
		default:
		}
		if linger == 0 {
			return group, true
		}
		if !armed {
			t.Reset(linger)
			armed = true
		}
		select {
		case d, ok := <-deliveries:
			if !ok {
				return group, false
			}
			group = append(group, d)
		case <-t.C:
			armed = false
			return group, true
		}
	}
	return group, true
}
