package idemamqp

import (
	"context"
	"errors"
	"fmt"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/internal/consume"
	amqp "github.com/rabbitmq/amqp091-go"
)

// MessageIDKey is the default key: the delivery's message-id property,
// which [Publisher.Publish] sets to the producer's stable id.
func MessageIDKey(d amqp.Delivery) (string, error) {
	if d.MessageId == "" {
		return "", fmt.Errorf("idemamqp: delivery from exchange %q, routing key %q has no message-id: %w", d.Exchange, d.RoutingKey, idem.ErrMissingKey)
	}
	return d.MessageId, nil
}

// ErrNacked is returned when the broker refuses a publish (basic.nack): it
// did not take responsibility for the message.
var ErrNacked = errors.New("idemamqp: publish nacked by the broker")

// Publisher publishes with publisher confirms on a channel of its own and
// sets the message-id property to a stable id.
//
// RabbitMQ has no broker-side deduplication: a publish retried after a lost
// confirm may be stored twice. The consumer's inbox, keyed by message-id,
// makes the second copy a duplicate; that is why the id must be stable.
//
// A Publisher is safe for concurrent use.
type Publisher struct {
	ch  *amqp.Channel
	cfg publisherConfig
}

// NewPublisher opens a channel on conn in confirm mode. Close releases it.
func NewPublisher(conn *amqp.Connection, opts ...PublisherOption) (*Publisher, error) {
	if conn == nil {
		return nil, fmt.Errorf("idemamqp: nil connection: %w", idem.ErrInvalidOption)
	}
	cfg := publisherConfig{persistent: true}
	if err := consume.Apply("idemamqp", &cfg, opts); err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("idemamqp: open channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		ch.Close()
		return nil, fmt.Errorf("idemamqp: confirm mode: %w", err)
	}
	return &Publisher{ch: ch, cfg: cfg}, nil
}

// Publish sends msg to exchange with routing key, its message-id set to id
// (a stable id of the business event, for example from [idem.DeriveKey];
// never a fresh one per attempt), and waits for the broker's confirm. It
// returns nil once the broker has taken responsibility for the message (for
// a persistent message on a durable queue: written to disk), an error
// wrapping [ErrNacked] when it refuses it, and ctx's error if the confirm
// does not come in time.
//
// If Publish returns an error or the process dies before it returns, the
// message may or may not have been stored: publish again with the same id;
// the consumer's inbox drops the extra copy.
func (p *Publisher) Publish(ctx context.Context, exchange, routingKey string, msg amqp.Publishing, id string) error {
	if err := idem.ValidateKey(id); err != nil {
		return fmt.Errorf("idemamqp: %w", err)
	}
	msg.MessageId = id
	if msg.DeliveryMode == 0 && p.cfg.persistent {
		msg.DeliveryMode = amqp.Persistent
	}
	dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, routingKey, false, false, msg)
	if err != nil {
		return fmt.Errorf("idemamqp: publish %s: %w", id, err)
	}
	return waitConfirm(ctx, dc, id)
}

// waitConfirm waits for one publish's confirm.
func waitConfirm(ctx context.Context, dc *amqp.DeferredConfirmation, id string) error {
	if dc == nil {
		return fmt.Errorf("idemamqp: publish %s: channel not in confirm mode", id)
	}
	ok, err := dc.WaitContext(ctx)
	if err != nil {
		return fmt.Errorf("idemamqp: publish %s: waiting for the confirm: %w", id, err)
	}
	if !ok {
		return fmt.Errorf("%w: %s", ErrNacked, id)
	}
	return nil
}

// Close closes the Publisher's channel; confirms still pending are lost
// (their Publish calls return an error).
func (p *Publisher) Close() error {
	if err := p.ch.Close(); err != nil && !errors.Is(err, amqp.ErrClosed) {
		return fmt.Errorf("idemamqp: close: %w", err)
	}
	return nil
}
