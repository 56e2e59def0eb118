package inbox

import (
	"context"
	"errors"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/option"
)

// WithTracer traces the Inbox's calls through t (package
// github.com/idem-go/idem/idemotel implements it with OpenTelemetry): one
// span per [Inbox.Process] or [Inbox.ProcessMessage] (idem.OpInboxProcess)
// and per [Inbox.ProcessBatch] or [Inbox.ProcessBatchSet]
// (idem.OpInboxProcessBatch, idem.OpInboxProcessBatchSet), a child of the
// span in the call's context. The span's context is the context of the
// transaction and of the handler, so the handler's own spans (its SQL,
// its calls) nest under it.
//
// A Process span records the consumer (idem.consumer), the key's hash
// (idem.key_hash; never the key), the number of transactions run
// (idem.tx.attempts: more than 1 when a serialization failure, deadlock or
// busy database was retried) and its outcome (idem.outcome): "applied",
// "duplicate", "mismatch" (the key is recorded with another fingerprint)
// or "error" (the span is marked failed with the error). A batch span
// records the consumer, idem.batch.size, idem.applied, idem.duplicates,
// idem.failed (messages that failed alone: a handler error, a mismatch, an
// unusable key), idem.tx.attempts and the outcome "committed" or "error".
// A call refused before any I/O (a nil handler, Process's invalid key)
// makes no span.
//
// Without WithTracer the Inbox does no tracing work at all.
func WithTracer(t idem.Tracer) Option {
	return option.Check("inbox", t != nil, func(c *config) { c.tracer = t }, "nil tracer")
}

// span is one traced inbox call. A nil *span, the Inbox's without a
// tracer, does nothing.
type span struct {
	s        idem.Span
	attempts int
}

// startSpan begins the span of op for key (none for a batch).
func (in *Inbox) startSpan(ctx context.Context, op, key string) (context.Context, *span) {
	if in.cfg.tracer == nil {
		return ctx, nil
	}
	ctx, s := in.cfg.tracer.Start(ctx, op)
	s.Attr(idem.AttrConsumer, in.consumer)
	if key != "" {
		s.Key(key)
	}
	return ctx, &span{s: s}
}

// attempt counts one transaction.
func (sp *span) attempt() {
	if sp != nil {
		sp.attempts++
	}
}

func (sp *span) endProcess(applied bool, err error) {
	if sp == nil {
		return
	}
	sp.s.Attr(idem.AttrTxAttempt, sp.attempts)
	switch {
	case applied:
		sp.s.End(idem.Applied.String(), nil)
	case err == nil:
		sp.s.End(idem.Duplicate.String(), nil)
	case errors.Is(err, idem.ErrFingerprintMismatch):
		sp.s.End("mismatch", nil) // the inbox did its job: the key was reused
	default:
		sp.s.End("error", err)
	}
}

// traceBatch is processBatch inside a span named op.
func (in *Inbox) traceBatch(ctx context.Context, op string, msgs []Message, set SetHandler, fn BatchHandler) ([]Result, error) {
	ctx, sp := in.startSpan(ctx, op, "")
	if sp == nil {
		return in.processBatch(ctx, msgs, set, fn, nil)
	}
	sp.s.Attr(idem.AttrBatchSize, len(msgs))
	results, err := in.processBatch(ctx, msgs, set, fn, sp)
	var applied, dups, failed int
	for _, r := range results {
		switch {
		case r.Err != nil:
			failed++
		case r.Applied:
			applied++
		default:
			dups++
		}
	}
	sp.s.Attr(idem.AttrApplied, applied)
	sp.s.Attr(idem.AttrDuplicate, dups)
	sp.s.Attr(idem.AttrFailed, failed)
	sp.s.Attr(idem.AttrTxAttempt, sp.attempts)
	if err != nil {
		sp.s.End("error", err)
	} else {
		sp.s.End("committed", nil)
	}
	return results, err
}
