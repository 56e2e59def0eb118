package idemnats

import (
	"context"
	"fmt"
	"runtime/debug"
	"strings"
	"time"

	"github.com/idem-go/idem/adapters/internal/consume"
	"github.com/nats-io/nats.go/jetstream"
)

// DedupSet remembers message keys for a horizon, recording a key only
// when told to: *diskwindow.Set (package window/diskwindow, a day of keys
// on one disk) is one. SeenBatch answers, for each id in scope, whether it
// was recorded less than the horizon ago, without recording; AddBatch
// records the new ones durably before it returns.
type DedupSet interface {
	SeenBatch(ctx context.Context, scope string, ids []string, now time.Time, dups []bool) ([]bool, error)
	AddBatch(ctx context.Context, scope string, ids []string, now time.Time, dups []bool) ([]bool, error)
}

// WindowHandler applies one message whose key the [WindowConsumer]'s set
// does not hold. Its effect must be idempotent downstream (pass the key
// on): it may run again for the same message (see [NewWindowConsumer]).
// Return an error wrapped with [idem.Permanent] when a redelivery cannot
// succeed (the message is dead-lettered at once); any other error naks the
// message and it is redelivered later.
type WindowHandler func(ctx context.Context, msg jetstream.Msg) error

// WindowConsumer is a pull consume loop for effects that are idempotent
// downstream and need no inbox, only to skip the duplicates JetStream
// redelivers (or a producer published twice beyond the stream's duplicate
// window): a message whose key the set holds is acked as a duplicate and
// its handler does not run; the keys of the messages whose handler
// succeeded are recorded in the set, durably, before they are acked.
type WindowConsumer struct {
	c     *Consumer
	s     DedupSet
	h     WindowHandler
	scope string
	now   func() time.Time
}

// NewWindowConsumer returns a WindowConsumer that fetches from cons (a pull
// consumer with AckExplicit, the default) and, for each group of messages
// (see [Consumer.Run]), asks s which keys it holds (scope: the consumer's
// stream and subject filter, "ORDERS" or "ORDERS/orders.eu.>"), runs h on
// the others in order, records the keys of those h applied in one
// AddBatch, and only then acks them. The key is the Nats-Msg-Id header
// (JetStream's own deduplication id) unless [WithKey] says otherwise.
// WithKey, WithBatchSize, WithMaxAttempts, WithBackoff, WithDeadLetter,
// WithObserver, WithLogger, WithTracer, WithMaxWait, WithLinger and
// WithDoubleAck apply as for [NewConsumer]; WithSetHandler and
// WithFingerprint (the set keeps no fingerprint) are refused.
//
// What it guarantees: a message is never skipped unless its key was
// recorded after a successful run of h (a message whose h failed is nak'd
// and redelivered, or dead-lettered, never remembered), so nothing is
// lost; a message is skipped if its key was recorded less than s's horizon
// ago. If the process dies after h ran and before AddBatch returned, the
// message is redelivered after the consumer's AckWait and h runs again:
// the effect must absorb that, as any at-least-once effect does. If s
// fails (a full disk, a closed set), Run returns its error without acking
// the group: fail closed; its messages are redelivered to the next
// consumer.
//
// Give each JetStream consumer (each stream and filter) a set of its own,
// on the disk of the process that runs it; to share the work of one
// stream among processes, give each a disjoint filter and a set
// (docs/dedup-disk.md).
func NewWindowConsumer(cons jetstream.Consumer, s DedupSet, h WindowHandler, opts ...Option) (*WindowConsumer, error) {
	c := &Consumer{cons: cons, cfg: defaultConfig()}
	switch {
	case cons == nil:
		return nil, c.cfg.Invalid("nil consumer")
	case s == nil:
		return nil, c.cfg.Invalid("nil dedup set")
	case h == nil:
		return nil, c.cfg.Invalid("nil handler")
	}
	if err := consume.Apply("idemnats", &c.cfg, opts); err != nil {
		return nil, err
	}
	switch {
	case c.cfg.Set != nil:
		return nil, c.cfg.Invalid("WithSetHandler does not apply to a WindowConsumer")
	case c.cfg.Fingerprint != nil:
		return nil, c.cfg.Invalid("WithFingerprint does not apply to a WindowConsumer (the set keeps no fingerprint)")
	}
	info := cons.CachedInfo()
	if info == nil {
		return nil, c.cfg.Invalid("consumer without info")
	}
	w := &WindowConsumer{c: c, s: s, h: h, scope: windowScope(info), now: time.Now}
	c.proc = w.process
	return w, nil
}

// windowScope names the messages a consumer receives: its stream, and its
// subject filters if it has any.
func windowScope(info *jetstream.ConsumerInfo) string {
	filters := info.Config.FilterSubjects
	if f := info.Config.FilterSubject; f != "" {
		filters = append([]string{f}, filters...)
	}
	if len(filters) == 0 {
		return info.Stream
	}
	return info.Stream + "/" + strings.Join(filters, ",")
}

// Scope returns the scope the consumer's keys are recorded in.
func (w *WindowConsumer) Scope() string { return w.scope }

// Run pulls, processes and acks messages until ctx is done (returning its
// error, wrapped), the connection is closed (an error wrapping
// [idem.ErrClosed]), or the dedup set fails (its error; the group is not
// acked, so its messages are redelivered). As [Consumer.Run], it waits out
// reconnects, keeps the next group pulled while one is processed, and may
// be called from several goroutines.
func (w *WindowConsumer) Run(ctx context.Context) error { return w.c.Run(ctx) }

// process decides one group through the set: duplicates by the set, the
// others by h, whose applied keys are recorded before any is acked.
func (w *WindowConsumer) process(ctx context.Context, ds []consume.Delivery[jetstream.Msg]) ([]consume.Decision, error) {
	cfg := &w.c.cfg
	bctx, batch := cfg.StartBatch(ctx, len(ds))
	decs, err := cfg.Window(bctx, w.s, w.scope, w.now(), w.scope, ds, w.apply)
	batch.End(bctx, err)
	if err != nil {
		for i := range ds {
			cfg.Unsettled(&ds[i], err)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &stopError{err}
	}
	for _, dec := range decs {
		batch.Count(dec)
	}
	return decs, nil
}

// apply runs h once on d, under d's span; a failure is retried by
// JetStream's redelivery (nak with delay), not in process.
func (w *WindowConsumer) apply(ctx context.Context, d *consume.Delivery[jetstream.Msg]) (consume.Decision, error) {
	sctx := w.c.cfg.Start(ctx, d)
	return w.c.cfg.Decide(d, true, w.run(sctx, d.Msg)), nil
}

// run calls h, turning a panic into its error so that one poison message
// is retried and dead-lettered instead of killing the consumer.
func (w *WindowConsumer) run(ctx context.Context, m jetstream.Msg) (err error) {
	defer func() {
		if p := recover(); p != nil {
			w.c.cfg.Logger.Error("idemnats: handler panicked", "panic", p, "stack", string(debug.Stack()))
			err = fmt.Errorf("idemnats: handler panicked: %v", p)
		}
	}()
	return w.h(ctx, m)
}
