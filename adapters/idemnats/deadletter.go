package idemnats

import (
	"context"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Headers set on a dead-lettered message, beside its original headers.
const (
	HeaderReason       = "Idem-Reason"        // one of the Reason* constants
	HeaderError        = "Idem-Error"         // the error, as text
	HeaderKey          = "Idem-Key"           // the inbox key, when there was one
	HeaderSubject      = "Idem-Subject"       // the original subject
	HeaderStream       = "Idem-Stream"        // the original stream
	HeaderStreamSeq    = "Idem-Stream-Seq"    // the original stream sequence
	HeaderConsumer     = "Idem-Consumer"      // the consumer that gave up
	HeaderNumDelivered = "Idem-Num-Delivered" // deliveries so far
	HeaderOriginalID   = "Idem-Original-Msg-Id"
)

// deadLetter republishes m to the dead letter (if any) and then terminates
// it. If the republish fails, m is nak'd instead: it is never terminated
// without a copy when a dead letter is configured.
func (c *Consumer) deadLetter(ctx context.Context, m jetstream.Msg, meta *jetstream.MsgMetadata, key, reason string, cause error) error {
	if c.cfg.dlqJS != nil {
		if err := c.republish(ctx, m, meta, key, reason, cause); err != nil {
			c.cfg.logger.Warn("idemnats: dead letter failed; redelivering", "key", key, "err", err)
			if meta == nil {
				return fmt.Errorf("idemnats: dead letter: %w", err)
			}
			return c.retry(delivery{msg: m, meta: meta}, key, err)
		}
	}
	text := reason
	if cause != nil {
		text += ": " + cause.Error()
	}
	if err := m.TermWithReason(text); err != nil {
		return fmt.Errorf("idemnats: term %s: %w", key, err)
	}
	c.cfg.logger.Error("idemnats: message dead-lettered", "key", key, "reason", reason, "err", cause, "dead_letter", c.cfg.dlqSubject)
	c.observe(Event{Msg: m, Key: key, Outcome: DeadLettered, Reason: reason, Err: cause})
	return nil
}

func (c *Consumer) republish(ctx context.Context, m jetstream.Msg, meta *jetstream.MsgMetadata, key, reason string, cause error) error {
	h := nats.Header{}
	for k, v := range m.Headers() {
		h[k] = append([]string(nil), v...)
	}
	if id := h.Get(jetstream.MsgIDHeader); id != "" {
		h.Set(HeaderOriginalID, id)
	}
	h.Del(jetstream.MsgIDHeader)
	h.Set(HeaderReason, reason)
	if cause != nil {
		h.Set(HeaderError, cause.Error())
	}
	if key != "" {
		h.Set(HeaderKey, key)
	}
	h.Set(HeaderSubject, m.Subject())
	var opts []jetstream.PublishOpt
	if meta != nil {
		h.Set(HeaderStream, meta.Stream)
		h.Set(HeaderStreamSeq, strconv.FormatUint(meta.Sequence.Stream, 10))
		h.Set(HeaderConsumer, meta.Consumer)
		h.Set(HeaderNumDelivered, strconv.FormatUint(meta.NumDelivered, 10))
		// The same stored message dead-lettered twice (a crash before the
		// Term) is one copy in the dead letter's duplicate window.
		opts = append(opts, jetstream.WithMsgID(fmt.Sprintf("dlq:%s:%d", meta.Stream, meta.Sequence.Stream)))
	}
	_, err := c.cfg.dlqJS.PublishMsg(ctx, &nats.Msg{Subject: c.cfg.dlqSubject, Header: h, Data: m.Data()}, opts...)
	return err
}
