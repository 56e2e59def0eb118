package consume

import (
	"context"

	"github.com/idem-go/idem"
)

// Span outcomes the core writes besides a Decision's outcome names.
const (
	// OutcomeUnsettled ends a message span when the transport left the
	// message without a decision (shutdown, a failed batch run again, a
	// consumer stopping on an error): the broker delivers it again, or the
	// transport runs it again under a new span.
	OutcomeUnsettled = "unsettled"
	// OutcomeProcessed ends a batch span when every message of the batch
	// got a decision.
	OutcomeProcessed = "processed"
	// OutcomeFailed ends a batch span when its transaction failed as a
	// whole: nothing of it is known to have committed. It is the inbox
	// batch span's outcome for the same failure.
	OutcomeFailed = "error"
)

// Start begins d's message span ([idem.OpConsume]) as a child of the span
// in ctx, linked to the producer's trace context in d's headers (through
// Config.Headers), and returns the context for the message's own work: an
// inbox or key store call made with it nests under the span. [Config.Report]
// ends the span with the decision; [Config.Unsettled] ends it when there is
// none. A span still open on d is first ended as [OutcomeUnsettled]. Without
// a Tracer, Start returns ctx and costs nothing.
func (c *Config[T]) Start(ctx context.Context, d *Delivery[T]) context.Context {
	if c.Tracer == nil {
		return ctx
	}
	if d.span != nil {
		c.end(d, OutcomeUnsettled, nil)
	}
	ctx, d.span = c.Tracer.Start(ctx, idem.OpConsume)
	if c.System != "" {
		d.span.Attr(idem.AttrSystem, c.System)
	}
	d.span.Attr(idem.AttrAttempt, d.Attempt)
	if c.Headers != nil {
		if h := c.Headers(d.Msg); h != nil {
			d.span.Link(h)
		}
	}
	return ctx
}

// Unsettled ends d's open span, if any, as [OutcomeUnsettled] with err:
// the transport leaves d without a decision.
func (c *Config[T]) Unsettled(d *Delivery[T], err error) {
	if d.span != nil {
		c.end(d, OutcomeUnsettled, err)
	}
}

// end ends d's open span with outcome and err, recording the key's hash
// when one was derived.
func (c *Config[T]) end(d *Delivery[T], outcome string, err error) {
	if d.Key != "" {
		d.span.Key(d.Key)
	}
	d.span.End(outcome, err)
	d.span = nil
}

// Batch is the span of one fetched batch ([idem.OpConsumeBatch]), from
// [Config.StartBatch]. The zero Batch (no Tracer) does nothing.
type Batch struct {
	span                   idem.Span
	applied, dupes, failed int
}

// StartBatch begins the span of a batch of n messages as a child of the
// span in ctx and returns the context to start the batch's message spans
// ([Config.Start]) and its inbox call with: the inbox transaction's span
// nests under the batch's. Without a Tracer it returns ctx and a Batch that
// does nothing.
func (c *Config[T]) StartBatch(ctx context.Context, n int) (context.Context, Batch) {
	if c.Tracer == nil {
		return ctx, Batch{}
	}
	var b Batch
	ctx, b.span = c.Tracer.Start(ctx, idem.OpConsumeBatch)
	if c.System != "" {
		b.span.Attr(idem.AttrSystem, c.System)
	}
	b.span.Attr(idem.AttrBatchSize, n)
	return ctx, b
}

// Count adds dec to the batch's applied, duplicate or failed (retried or
// dead-lettered) count.
func (b *Batch) Count(dec Decision) {
	switch dec.Outcome {
	case idem.Applied:
		b.applied++
	case idem.Duplicate:
		b.dupes++
	default:
		b.failed++
	}
}

// End ends the batch span with its counts: [OutcomeProcessed] when err is
// nil, else [OutcomeFailed] (the batch's transaction failed as a whole) or,
// when ctx ended, [OutcomeUnsettled], with err. End is called once.
func (b *Batch) End(ctx context.Context, err error) {
	if b.span == nil {
		return
	}
	b.span.Attr(idem.AttrApplied, b.applied)
	b.span.Attr(idem.AttrDuplicate, b.dupes)
	b.span.Attr(idem.AttrFailed, b.failed)
	outcome := OutcomeProcessed
	switch {
	case err != nil && ctx.Err() != nil:
		outcome = OutcomeUnsettled
	case err != nil:
		outcome = OutcomeFailed
	}
	b.span.End(outcome, err)
	b.span = nil
}
