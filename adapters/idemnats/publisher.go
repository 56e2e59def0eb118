package idemnats

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/internal/consume"
	"github.com/idem-go/idem/internal/retry"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// MsgIDKey is the default key: the message's Nats-Msg-Id header, the id its
// producer also used for JetStream's duplicate window.
func MsgIDKey(m jetstream.Msg) (string, error) {
	id := m.Headers().Get(jetstream.MsgIDHeader)
	if id == "" {
		return "", fmt.Errorf("idemnats: message on %q has no %s header: %w", m.Subject(), jetstream.MsgIDHeader, idem.ErrMissingKey)
	}
	return id, nil
}

// Publisher publishes to JetStream with a stable Nats-Msg-Id, so that the
// stream stores a message once however often it is sent within the
// stream's duplicate window (Duplicates, default 2 minutes).
type Publisher struct {
	js  jetstream.JetStream
	cfg publisherConfig
}

// NewPublisher returns a Publisher on js.
func NewPublisher(js jetstream.JetStream, opts ...PublisherOption) (*Publisher, error) {
	if js == nil {
		return nil, fmt.Errorf("idemnats: nil JetStream: %w", idem.ErrInvalidOption)
	}
	p := &Publisher{js: js, cfg: publisherConfig{retries: 3, wait: 250 * time.Millisecond, timeout: 5 * time.Second}}
	if err := consume.Apply("idemnats", &p.cfg, opts); err != nil {
		return nil, err
	}
	return p, nil
}

// PubResult is the stream's answer to a publish.
type PubResult struct {
	Stream string
	// Sequence is the message's stream sequence; for a Duplicate, the
	// sequence of the copy stored first.
	Sequence uint64
	// Duplicate is true when the stream already held a message with this
	// id within its duplicate window: nothing was stored.
	Duplicate bool
}

// Publish sends msg with Nats-Msg-Id id (a stable id of the business event,
// for example from [idem.DeriveKey]: never a fresh one per attempt) and
// waits for the stream's PubAck. An attempt that gets no PubAck is retried
// with the same id (see [WithPublishRetries]); the stream drops the copy if an
// earlier attempt was stored and answers Duplicate with the original
// sequence.
//
// If the process dies before the PubAck, the message may or may not be
// stored: publish again with the same id within the duplicate window. An
// error from Publish means the same.
func (p *Publisher) Publish(ctx context.Context, msg *nats.Msg, id string) (PubResult, error) {
	if err := idem.ValidateKey(id); err != nil {
		return PubResult{}, fmt.Errorf("idemnats: %w", err)
	}
	if msg == nil || msg.Subject == "" {
		return PubResult{}, fmt.Errorf("idemnats: publish: message without a subject: %w", idem.ErrInvalidArgument)
	}
	var last error
	for attempt := 0; attempt <= p.cfg.retries; attempt++ {
		if attempt > 0 {
			if err := retry.Sleep(ctx, p.cfg.wait); err != nil {
				return PubResult{}, fmt.Errorf("idemnats: publish %s: %w (last attempt: %v)", id, err, last)
			}
		}
		actx, cancel := context.WithTimeout(ctx, p.cfg.timeout)
		ack, err := p.js.PublishMsg(actx, msg, jetstream.WithMsgID(id))
		cancel()
		if err == nil {
			return PubResult{Stream: ack.Stream, Sequence: ack.Sequence, Duplicate: ack.Duplicate}, nil
		}
		last = err
		if ctx.Err() != nil || !retryablePublish(err) {
			break
		}
	}
	return PubResult{}, fmt.Errorf("idemnats: publish %s: %w", id, last)
}

// retryablePublish reports whether err leaves the publish's outcome unknown
// or transient (no PubAck), as opposed to a refusal by the stream.
func retryablePublish(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return false
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrDisconnected)
}
