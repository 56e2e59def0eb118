package idemnats

import (
	"context"
	"fmt"
	"strconv"

	"github.com/idem-go/idem/outbox"
	"github.com/nats-io/nats.go"
)

// HeaderOutboxSeq carries the outbox's sequence number of a message.
const HeaderOutboxSeq = "Idem-Outbox-Seq"

// OutboxPublisher publishes outbox batches to JetStream: it implements
// outbox.Publisher. Each message goes to the subject m.Topic with
// Nats-Msg-Id = m.ID, so a batch that the relay publishes again (it died
// after publishing, before marking) is dropped by the stream's duplicate
// window instead of stored twice; after the window, the consumer's inbox
// absorbs it. Messages are published one by one in batch order and each
// waits for its PubAck, so one key's messages are stored in order.
type OutboxPublisher struct{ p *Publisher }

// OutboxPublisher returns p as an outbox.Publisher.
func (p *Publisher) OutboxPublisher() *OutboxPublisher { return &OutboxPublisher{p: p} }

var _ outbox.Publisher = (*OutboxPublisher)(nil)

// Publish implements outbox.Publisher. It returns nil only when every
// message was acknowledged by the stream (stored, or a duplicate of a stored
// copy).
func (o *OutboxPublisher) Publish(ctx context.Context, msgs []outbox.Message) error {
	for _, m := range msgs {
		msg := nats.NewMsg(m.Topic)
		msg.Data = m.Payload
		for k, v := range m.Headers {
			msg.Header.Set(k, v)
		}
		msg.Header.Set(HeaderOutboxSeq, strconv.FormatInt(m.Seq, 10))
		if _, err := o.p.Publish(ctx, msg, m.ID); err != nil {
			return fmt.Errorf("idemnats: outbox message %s: %w", m.ID, err)
		}
	}
	return nil
}
