package idemamqp

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/internal/consume"
	"github.com/idem-go/idem/inbox"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Consumer consumes a queue through an inbox: deliveries are applied in
// groups, one transaction each ([inbox.Inbox.ProcessBatch]), and acked only
// after the commit.
type Consumer struct {
	conn  *amqp.Connection
	queue string
	cfg   config
	core  *consume.Inbox[amqp.Delivery]

	afterCommit func() // test hook: runs between the commit and the acks
}

// NewConsumer returns a Consumer of queue on conn. Run opens its own
// channels (one to consume, one in confirm mode to requeue and
// dead-letter) and closes them when it returns. With [WithSetHandler],
// handler is the per-delivery fallback of the set handler and may be nil.
func NewConsumer(conn *amqp.Connection, queue string, in *inbox.Inbox, handler Handler, opts ...Option) (*Consumer, error) {
	c := &Consumer{conn: conn, queue: queue, cfg: defaultConfig()}
	if conn == nil || queue == "" {
		return nil, c.cfg.Invalid("nil connection or empty queue")
	}
	if err := consume.Apply("idemamqp", &c.cfg, opts); err != nil {
		return nil, err
	}
	if c.cfg.BatchSize > c.cfg.prefetch {
		return nil, c.cfg.Invalid("batch size %d above prefetch %d: groups could never fill", c.cfg.BatchSize, c.cfg.prefetch)
	}
	var err error
	if c.core, err = consume.NewInbox(in, consume.Handler[amqp.Delivery](handler), &c.cfg.Config); err != nil {
		return nil, err
	}
	return c, nil
}

// Run consumes until ctx is done (it returns ctx's error, wrapped) or the
// channel or connection closes (an error wrapping [idem.ErrClosed]: the
// broker requeues every unacked delivery, and the caller must reconnect,
// which amqp091-go does not do, and call Run again). Unacked
// deliveries go back to the queue when Run's channel closes. While one
// group's transaction runs, the next group is gathered on a second
// goroutine (a prefetch of at least twice the batch size keeps it fed);
// Run owns no goroutine that outlives it.
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
		return closed("open channel", err)
	}
	defer ch.Close()
	pub, err := c.conn.Channel()
	if err != nil {
		return closed("open channel", err)
	}
	defer pub.Close()
	if err := pub.Confirm(false); err != nil {
		return fmt.Errorf("idemamqp: confirm mode: %w", err)
	}
	if err := ch.Qos(c.cfg.prefetch, 0, false); err != nil {
		return fmt.Errorf("idemamqp: qos: %w", err)
	}
	deliveries, err := ch.Consume(c.queue, "", false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("idemamqp: consume %s: %w", c.queue, err)
	}
	s := &session{c: c, pub: pub}
	// The next group is gathered on its own goroutine while the current
	// one's transaction runs; Run waits for that goroutine to end.
	done := make(chan struct{})
	groups := c.groups(deliveries, done)
	defer func() {
		close(done)
		for range groups {
		}
	}()
	for {
		var g pending
		select {
		case <-ctx.Done():
			return fmt.Errorf("idemamqp: %w", ctx.Err())
		case g = <-groups:
		}
		if len(g.ds) > 0 {
			if err := s.process(ctx, g.ds); err != nil {
				if ctx.Err() != nil {
					return fmt.Errorf("idemamqp: %w", ctx.Err())
				}
				if errors.Is(err, amqp.ErrClosed) {
					return closed("channel closed", err)
				}
				return err
			}
		}
		if !g.open {
			return closed("deliveries ended", nil)
		}
	}
}

// pending is one gathered group; open is false once the deliveries ended.
type pending struct {
	ds   []amqp.Delivery
	open bool
}

// groups gathers groups from deliveries on its own goroutine and hands
// them over one at a time. The goroutine exits, closing the channel, after
// the deliveries end or once done closes (within the linger).
func (c *Consumer) groups(deliveries <-chan amqp.Delivery, done <-chan struct{}) <-chan pending {
	out := make(chan pending)
	go func() {
		defer close(out)
		linger := time.NewTimer(time.Hour)
		defer linger.Stop()
		for {
			g := pending{ds: make([]amqp.Delivery, 0, c.cfg.BatchSize)}
			select {
			case <-done:
				return
			case d, ok := <-deliveries:
				if ok {
					g.ds = append(g.ds, d)
					g.ds, ok = gather(deliveries, g.ds, c.cfg.BatchSize, c.cfg.linger, linger)
				}
				g.open = ok
			}
			select {
			case out <- g:
			case <-done:
				return
			}
			if !g.open {
				return
			}
		}
	}()
	return out
}

// closed is Run's error when the channel or connection went away.
func closed(what string, err error) error {
	if err == nil {
		return fmt.Errorf("idemamqp: %s: %w", what, idem.ErrClosed)
	}
	return fmt.Errorf("idemamqp: %s: %w: %w", what, idem.ErrClosed, err)
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
