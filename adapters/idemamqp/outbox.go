package idemamqp

import (
	"context"
	"fmt"
	"strconv"

	"github.com/idem-go/idem/outbox"
	amqp "github.com/rabbitmq/amqp091-go"
)

// HeaderOutboxSeq carries the outbox's sequence number of a message.
const HeaderOutboxSeq = "x-idem-outbox-seq"

// OutboxPublisher publishes outbox batches to RabbitMQ: it implements
// outbox.Publisher. Each message goes to the publisher's exchange with the
// message's Topic as routing key, message-id = the outbox id, persistent,
// and waits for the broker's confirm, one by one in batch order. RabbitMQ
// has no duplicate window: a batch that the relay publishes again (it died
// after publishing, before marking) is delivered again, and the consumer's
// inbox, keyed by message-id, absorbs it.
type OutboxPublisher struct {
	p        *Publisher
	exchange string
}

// OutboxPublisher returns p as an outbox.Publisher that publishes to
// exchange ("" is the default exchange, where the routing key names the
// queue).
func (p *Publisher) OutboxPublisher(exchange string) *OutboxPublisher {
	return &OutboxPublisher{p: p, exchange: exchange}
}

var _ outbox.Publisher = (*OutboxPublisher)(nil)

// Publish implements outbox.Publisher. It returns nil only when the broker
// confirmed every message.
func (o *OutboxPublisher) Publish(ctx context.Context, msgs []outbox.Message) error {
	for _, m := range msgs {
		hdr := amqp.Table{}
		for k, v := range m.Headers {
			hdr[k] = v
		}
		hdr[HeaderOutboxSeq] = strconv.FormatInt(m.Seq, 10)
		pub := amqp.Publishing{Body: m.Payload, Headers: hdr, DeliveryMode: amqp.Persistent}
		if err := o.p.Publish(ctx, o.exchange, m.Topic, pub, m.ID); err != nil {
			return fmt.Errorf("idemamqp: outbox message %s: %w", m.ID, err)
		}
	}
	return nil
}
