package idemamqp

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/internal/consume"
	"github.com/idem-go/idem/internal/retry"
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

// Headers the Consumer sets on requeued and dead-lettered messages.
const (
	HeaderAttempts   = "x-idem-attempts"    // failed attempts so far
	HeaderReason     = "x-idem-reason"      // an idem.Reason
	HeaderError      = "x-idem-error"       // the error, as text
	HeaderKey        = "x-idem-key"         // the inbox key, when there was one
	HeaderQueue      = "x-idem-queue"       // the queue that gave up
	HeaderExchange   = "x-idem-exchange"    // the original exchange
	HeaderRoutingKey = "x-idem-routing-key" // the original routing key
)

// session is one Run: the publishing channel for retries and dead letters,
// and the count of consecutive failed transactions.
type session struct {
	c        *Consumer
	pub      *amqp.Channel
	failures int
}

// process applies one group in one transaction and settles every delivery.
// An error means Run must stop (the channel is gone, or ctx is done).
func (s *session) process(ctx context.Context, group []amqp.Delivery) error {
	c := s.c
	ds := make([]consume.Delivery[amqp.Delivery], len(group))
	for i, d := range group {
		ds[i] = consume.Delivery[amqp.Delivery]{Msg: d, Attempt: attempts(d.Headers) + 1}
	}
	decs, err := c.core.Process(ctx, ds)
	if decs == nil {
		return err // ctx is done: closing the channel requeues them
	}
	if err != nil {
		// Nothing committed, or the outcome is unknown: ack none. The
		// store is at fault, not the messages: requeue after a pause,
		// without counting an attempt (fail closed).
		s.failures++
		pause := c.cfg.Backoff.Delay(s.failures - 1)
		c.cfg.Logger.Warn("idemamqp: batch failed; requeueing", "deliveries", len(ds), "err", err, "after", pause)
		if err := retry.Sleep(ctx, pause); err != nil {
			return s.unsettled(ds, err)
		}
		for i := range ds {
			if err := s.settle(ctx, &ds[i], decs[i], false); err != nil {
				return s.unsettled(ds[i:], err)
			}
		}
		return nil
	}
	s.failures = 0
	if c.afterCommit != nil {
		c.afterCommit()
	}
	allAcked := true
	for _, dec := range decs {
		allAcked = allAcked && dec.Ack()
	}
	if allAcked {
		// One frame acks the group: every earlier delivery on this
		// channel is already settled.
		if err := group[len(group)-1].Ack(true); err != nil {
			return s.unsettled(ds, fmt.Errorf("idemamqp: ack: %w", err))
		}
		for i := range ds {
			c.cfg.Report(&ds[i], decs[i])
		}
		return nil
	}
	for i := range ds {
		if err := s.settle(ctx, &ds[i], decs[i], true); err != nil {
			return s.unsettled(ds[i:], err)
		}
	}
	return nil
}

// unsettled ends the spans of ds, left unsettled when Run stops with err
// (the broker requeues them when the channel closes), and returns err.
func (s *session) unsettled(ds []consume.Delivery[amqp.Delivery], err error) error {
	for i := range ds {
		s.c.cfg.Unsettled(&ds[i], err)
	}
	return err
}

// settle performs one decision after the commit: ack, requeue (counted:
// republished with x-idem-attempts; not counted: nacked with requeue), or
// dead letter.
func (s *session) settle(ctx context.Context, d *consume.Delivery[amqp.Delivery], dec consume.Decision, counted bool) error {
	switch {
	case dec.Ack():
		if err := d.Msg.Ack(false); err != nil {
			return fmt.Errorf("idemamqp: ack: %w", err)
		}
	case dec.Outcome == idem.DeadLettered:
		return s.deadLetter(ctx, d, dec)
	case counted:
		// Requeue with the attempt counted: publish the copy to this
		// queue (default exchange), wait for its confirm, then ack the
		// original.
		h := copyHeaders(d.Msg.Headers)
		h[HeaderAttempts] = int32(d.Attempt)
		if err := s.publish(ctx, "", s.c.queue, d.Msg, h); err != nil {
			return s.requeue(d, err)
		}
		if err := d.Msg.Ack(false); err != nil {
			return fmt.Errorf("idemamqp: ack: %w", err)
		}
	default:
		if err := d.Msg.Nack(false, true); err != nil {
			return fmt.Errorf("idemamqp: nack: %w", err)
		}
	}
	s.c.cfg.Report(d, dec)
	return nil
}

// requeue nacks d with requeue after a failed publish: it is never dropped
// without a copy.
func (s *session) requeue(d *consume.Delivery[amqp.Delivery], cause error) error {
	s.c.cfg.Logger.Warn("idemamqp: publish failed; nacking with requeue", "key", d.Key, "err", cause)
	if err := d.Msg.Nack(false, true); err != nil {
		return fmt.Errorf("idemamqp: nack: %w", err)
	}
	s.c.cfg.Report(d, s.c.cfg.Retry(d, cause))
	return nil
}

// deadLetter publishes d to the dead letter and acks it, or nacks it
// without requeue when no dead letter is configured. If the publish fails,
// d is requeued: it is never dropped without a copy.
func (s *session) deadLetter(ctx context.Context, d *consume.Delivery[amqp.Delivery], dec consume.Decision) error {
	c := s.c
	if !c.cfg.dlxSet {
		if err := d.Msg.Nack(false, false); err != nil {
			return fmt.Errorf("idemamqp: reject: %w", err)
		}
	} else {
		h := copyHeaders(d.Msg.Headers)
		h[HeaderReason] = string(dec.Reason)
		h[HeaderError] = dec.Err.Error()
		h[HeaderQueue] = c.queue
		h[HeaderExchange] = d.Msg.Exchange
		h[HeaderRoutingKey] = d.Msg.RoutingKey
		h[HeaderAttempts] = int32(d.Attempt)
		if d.Key != "" {
			h[HeaderKey] = d.Key
		}
		if err := s.publish(ctx, c.cfg.dlxExchange, c.cfg.dlxKey, d.Msg, h); err != nil {
			return s.requeue(d, err)
		}
		if err := d.Msg.Ack(false); err != nil {
			return fmt.Errorf("idemamqp: ack: %w", err)
		}
	}
	c.cfg.Report(d, dec)
	return nil
}

// publish republishes d's body and properties with headers h, confirmed.
func (s *session) publish(ctx context.Context, exchange, key string, d amqp.Delivery, h amqp.Table) error {
	ctx, cancel := context.WithTimeout(ctx, confirmTimeout)
	defer cancel()
	msg := amqp.Publishing{
		Headers: h, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding,
		DeliveryMode: d.DeliveryMode, Priority: d.Priority, CorrelationId: d.CorrelationId,
		ReplyTo: d.ReplyTo, Expiration: d.Expiration, MessageId: d.MessageId,
		Timestamp: d.Timestamp, Type: d.Type, AppId: d.AppId, Body: d.Body,
		// UserId is left out: the broker checks it against this
		// connection's user.
	}
	dc, err := s.pub.PublishWithDeferredConfirmWithContext(ctx, exchange, key, false, false, msg)
	if err != nil {
		return err
	}
	return waitConfirm(ctx, dc, d.MessageId)
}

func copyHeaders(h amqp.Table) amqp.Table {
	out := make(amqp.Table, len(h)+7)
	for k, v := range h {
		out[k] = v
	}
	return out
}

// attempts reads x-idem-attempts, whatever integer type it arrived as
// (0 when absent or not an integer).
func attempts(h amqp.Table) int {
	n, err := strconv.Atoi(fmt.Sprint(h[HeaderAttempts]))
	if err != nil || n < 0 {
		return 0
	}
	return n
}
