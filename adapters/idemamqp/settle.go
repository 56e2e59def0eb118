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

// Headers the Consumer sets on requeued and dead-lettered messages.
const (
	HeaderAttempts   = "x-idem-attempts"    // failed attempts so far
	HeaderReason     = "x-idem-reason"      // one of the Reason* constants
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
	items := make([]inbox.Message, 0, len(group))
	for _, d := range group {
		key, err := c.cfg.key(d)
		if err == nil {
			err = idem.ValidateKey(key)
		}
		if err != nil {
			if err := s.deadLetter(ctx, d, key, ReasonNoKey, err); err != nil {
				return err
			}
			continue
		}
		m := inbox.Message{Key: key, Value: d}
		if c.cfg.fingerprint != nil {
			m.Fingerprint = c.cfg.fingerprint(d)
			if len(m.Fingerprint) > inbox.MaxFingerprintLen {
				err := fmt.Errorf("idemamqp: fingerprint of %d bytes is longer than %d", len(m.Fingerprint), inbox.MaxFingerprintLen)
				if err := s.deadLetter(ctx, d, key, ReasonFingerprint, err); err != nil {
					return err
				}
				continue
			}
		}
		items = append(items, m)
	}
	if len(items) == 0 {
		return nil
	}
	results, err := c.apply(ctx, items)
	if err != nil {
		// Nothing committed, or the outcome is unknown: ack none. The
		// store is at fault, not the messages: requeue after a pause,
		// without counting an attempt (fail closed).
		if ctx.Err() != nil {
			return ctx.Err() // closing the channel requeues them
		}
		s.failures++
		pause := min(50*time.Millisecond<<min(s.failures, 6), 2*time.Second)
		c.cfg.logger.Warn("idemamqp: batch failed; requeueing", "deliveries", len(items), "err", err, "after", pause)
		if err := sleep(ctx, pause); err != nil {
			return err
		}
		for _, m := range items {
			d := m.Value.(amqp.Delivery)
			if err := d.Nack(false, true); err != nil {
				return fmt.Errorf("idemamqp: nack: %w", err)
			}
			c.observe(Event{Delivery: d, Key: m.Key, Outcome: Retried, Err: err})
		}
		return nil
	}
	s.failures = 0
	if c.afterCommit != nil {
		c.afterCommit()
	}
	allOK := true
	for _, r := range results {
		allOK = allOK && r.Err == nil
	}
	if allOK {
		// One frame acks the group: every earlier delivery on this
		// channel is already settled.
		last := items[len(items)-1].Value.(amqp.Delivery)
		if err := last.Ack(true); err != nil {
			return fmt.Errorf("idemamqp: ack: %w", err)
		}
		for i, r := range results {
			c.observe(Event{Delivery: items[i].Value.(amqp.Delivery), Key: r.Key, Outcome: outcome(r)})
		}
		return nil
	}
	for i, r := range results {
		if err := s.settle(ctx, items[i].Value.(amqp.Delivery), r); err != nil {
			return err
		}
	}
	return nil
}

// apply runs one group through the inbox in one transaction: per delivery
// with the Handler, or with the set handler (the Handler, if any, as its
// per-delivery fallback).
func (c *Consumer) apply(ctx context.Context, items []inbox.Message) ([]inbox.Result, error) {
	var each inbox.BatchHandler
	if c.handler != nil {
		each = func(ctx context.Context, tx *sql.Tx, m inbox.Message) error {
			return c.handler(ctx, tx, m.Value.(amqp.Delivery))
		}
	}
	if c.cfg.set == nil {
		return c.in.ProcessBatch(ctx, items, each)
	}
	return c.in.ProcessBatchSet(ctx, items, func(ctx context.Context, tx *sql.Tx, fresh []inbox.Message) error {
		ds := make([]amqp.Delivery, len(fresh))
		for i, m := range fresh {
			ds[i] = m.Value.(amqp.Delivery)
		}
		return c.cfg.set(ctx, tx, ds)
	}, each)
}

func outcome(r inbox.Result) Outcome {
	if r.Applied {
		return Applied
	}
	return Duplicate
}

// settle acks, retries or dead-letters one delivery after the commit.
func (s *session) settle(ctx context.Context, d amqp.Delivery, r inbox.Result) error {
	attempt := attempts(d.Headers) + 1
	switch {
	case r.Err == nil:
		if err := d.Ack(false); err != nil {
			return fmt.Errorf("idemamqp: ack: %w", err)
		}
		s.c.observe(Event{Delivery: d, Key: r.Key, Outcome: outcome(r)})
		return nil
	case errors.Is(r.Err, idem.ErrFingerprintMismatch):
		return s.deadLetter(ctx, d, r.Key, ReasonFingerprint, r.Err)
	case idem.IsPermanent(r.Err):
		return s.deadLetter(ctx, d, r.Key, ReasonPermanent, r.Err)
	case attempt >= s.c.cfg.maxAttempts:
		return s.deadLetter(ctx, d, r.Key, ReasonMaxAttempts, r.Err)
	}
	// Requeue with the attempt counted: publish the copy to this queue
	// (default exchange), wait for its confirm, then ack the original.
	h := copyHeaders(d.Headers)
	h[HeaderAttempts] = int32(attempt)
	if err := s.publish(ctx, "", s.c.queue, d, h); err != nil {
		s.c.cfg.logger.Warn("idemamqp: requeue failed; nacking", "key", r.Key, "err", err)
		if err := d.Nack(false, true); err != nil {
			return fmt.Errorf("idemamqp: nack: %w", err)
		}
		return nil
	}
	if err := d.Ack(false); err != nil {
		return fmt.Errorf("idemamqp: ack: %w", err)
	}
	s.c.cfg.logger.Info("idemamqp: delivery failed; requeued", "key", r.Key, "attempt", attempt, "err", r.Err)
	s.c.observe(Event{Delivery: d, Key: r.Key, Outcome: Retried, Err: r.Err})
	return nil
}

// deadLetter publishes d to the dead letter and acks it, or nacks it
// without requeue when no dead letter is configured. If the publish fails,
// d is requeued: it is never dropped without a copy.
func (s *session) deadLetter(ctx context.Context, d amqp.Delivery, key, reason string, cause error) error {
	c := s.c
	if !c.cfg.dlxSet {
		if err := d.Nack(false, false); err != nil {
			return fmt.Errorf("idemamqp: reject: %w", err)
		}
	} else {
		h := copyHeaders(d.Headers)
		h[HeaderReason] = reason
		h[HeaderError] = cause.Error()
		h[HeaderQueue] = c.queue
		h[HeaderExchange] = d.Exchange
		h[HeaderRoutingKey] = d.RoutingKey
		h[HeaderAttempts] = int32(attempts(d.Headers) + 1)
		if key != "" {
			h[HeaderKey] = key
		}
		if err := s.publish(ctx, c.cfg.dlxExchange, c.cfg.dlxKey, d, h); err != nil {
			c.cfg.logger.Warn("idemamqp: dead letter failed; requeueing", "key", key, "err", err)
			if err := d.Nack(false, true); err != nil {
				return fmt.Errorf("idemamqp: nack: %w", err)
			}
			return nil
		}
		if err := d.Ack(false); err != nil {
			return fmt.Errorf("idemamqp: ack: %w", err)
		}
	}
	c.cfg.logger.Error("idemamqp: delivery dead-lettered", "key", key, "reason", reason, "err", cause)
	c.observe(Event{Delivery: d, Key: key, Outcome: DeadLettered, Reason: reason, Err: cause})
	return nil
}

// publish republishes d's body and properties with headers h, confirmed.
func (s *session) publish(ctx context.Context, exchange, key string, d amqp.Delivery, h amqp.Table) error {
	ctx, cancel := context.WithTimeout(ctx, s.c.cfg.confirmAfter)
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

func (c *Consumer) observe(e Event) {
	if c.cfg.observer != nil {
		c.cfg.observer(e)
	}
}

func copyHeaders(h amqp.Table) amqp.Table {
	out := make(amqp.Table, len(h)+7)
	for k, v := range h {
		out[k] = v
	}
	return out
}

// attempts reads x-idem-attempts, whatever integer type it arrived as.
func attempts(h amqp.Table) int {
	switch v := h[HeaderAttempts].(type) {
	case int8:
		return int(v)
	case int16:
		return int(v)
	case int32:
		return int(v)
	case int64:
		return int(v)
	case int:
		return v
	case uint8:
		return int(v)
	case uint16:
		return int(v)
	case uint32:
		return int(v)
	}
	return 0
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
