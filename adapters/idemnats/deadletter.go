package idemnats

import (
	"context"
	"fmt"
	"strconv"

	"github.com/idem-go/idem/adapters/internal/consume"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Headers set on a dead-lettered message, beside its original headers.
const (
	HeaderReason       = "Idem-Reason"        // an idem.Reason, or ReasonNoMetadata
	HeaderError        = "Idem-Error"         // the error, as text
	HeaderKey          = "Idem-Key"           // the inbox key, when there was one
	HeaderSubject      = "Idem-Subject"       // the original subject
	HeaderStream       = "Idem-Stream"        // the original stream
	HeaderStreamSeq    = "Idem-Stream-Seq"    // the original stream sequence
	HeaderConsumer     = "Idem-Consumer"      // the consumer that gave up
	HeaderNumDelivered = "Idem-Num-Delivered" // deliveries so far
	HeaderOriginalID   = "Idem-Original-Msg-Id"
)

// deadLetter republishes d to the dead letter (if any) and then terminates
// it. If the republish fails, d is nak'd instead: it is never terminated
// without a copy when a dead letter is configured.
func (c *Consumer) deadLetter(ctx context.Context, d *consume.Delivery[jetstream.Msg], meta *jetstream.MsgMetadata, dec consume.Decision) error {
	if c.cfg.dlqJS != nil {
		if err := c.republish(ctx, d, meta, dec); err != nil {
			c.cfg.Logger.Warn("idemnats: dead letter failed; redelivering", "key", d.Key, "err", err)
			if meta == nil {
				return fmt.Errorf("idemnats: dead letter: %w", err)
			}
			return c.settle(ctx, d, meta, c.cfg.Retry(d, err))
		}
	}
	text := string(dec.Reason)
	if dec.Err != nil {
		text += ": " + dec.Err.Error()
	}
	if err := d.Msg.TermWithReason(text); err != nil {
		return fmt.Errorf("idemnats: term %s: %w", d.Key, err)
	}
	c.cfg.Report(d, dec)
	return nil
}

func (c *Consumer) republish(ctx context.Context, d *consume.Delivery[jetstream.Msg], meta *jetstream.MsgMetadata, dec consume.Decision) error {
	m := d.Msg
	h := nats.Header{}
	for k, v := range m.Headers() {
		h[k] = append([]string(nil), v...)
	}
	if id := h.Get(jetstream.MsgIDHeader); id != "" {
		h.Set(HeaderOriginalID, id)
	}
	h.Del(jetstream.MsgIDHeader)
	h.Set(HeaderReason, string(dec.Reason))
	if dec.Err != nil {
		h.Set(HeaderError, dec.Err.Error())
	}
	if d.Key != "" {
		h.Set(HeaderKey, d.Key)
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
