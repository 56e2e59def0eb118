package idemkafka

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/internal/consume"
)

// DedupSet remembers record keys for a horizon, recording a key only when
// told to: *diskwindow.Set (package window/diskwindow, a day of keys on
// one disk) is one. SeenBatch answers, for each id in scope, whether it was
// recorded less than the horizon ago, without recording; AddBatch records
// the new ones durably before it returns.
type DedupSet interface {
	SeenBatch(ctx context.Context, scope string, ids []string, now time.Time, dups []bool) ([]bool, error)
	AddBatch(ctx context.Context, scope string, ids []string, now time.Time, dups []bool) ([]bool, error)
}

// WindowConsumer is a consume loop for effects that are idempotent
// downstream and need neither an inbox nor a key store, only to skip the
// duplicates a broker redelivers: a record whose key the set holds is a
// duplicate and its handler does not run; the keys of the records whose
// handler succeeded are recorded in the set, durably, before their offsets
// are marked.
type WindowConsumer struct {
	g   *group
	s   DedupSet
	h   KeystoreHandler
	now func() time.Time
}

// NewWindowConsumer builds a WindowConsumer over s: for each polled
// partition's records it asks s which keys it holds (scope: the topic),
// runs h on the others in order (retried and dead-lettered as the options
// say), records the keys of those h applied in one AddBatch, and only
// then marks the offsets. kopts and opts are as for NewConsumer; WithKey,
// WithMissingKey, the retry, backoff, dead-letter, observer, logger and
// tracer options apply.
//
// What it guarantees: a record is never skipped unless its key was
// recorded after a successful run of h (a record whose h failed is retried
// or dead-lettered, never remembered), so nothing is lost; a record is
// skipped if its key was recorded less than s's horizon ago. If the
// process dies after h ran and before AddBatch returned, the record is
// consumed again and h runs again: the effect must absorb that, as any
// at-least-once effect does (pass the key downstream). With one set per
// process, a partition that moves to another member brings no history:
// give each partition a set of its own that moves with it, or accept the
// repeats the downstream absorbs (docs/dedup-disk.md).
func NewWindowConsumer(s DedupSet, h KeystoreHandler, kopts []kgo.Opt, opts ...Option) (*WindowConsumer, error) {
	if s == nil {
		return nil, invalid("nil dedup set")
	}
	if h == nil {
		return nil, invalid("nil handler")
	}
	g, err := newGroup(opts, optKey|optMissingKey, "NewWindowConsumer")
	if err != nil {
		return nil, err
	}
	c := &WindowConsumer{g: g, s: s, h: h, now: time.Now}
	if err := g.start(kopts, c.process); err != nil {
		return nil, err
	}
	return c, nil
}

// Client returns the franz-go client the WindowConsumer owns, for
// producing and admin requests. Do not poll, commit or close it.
func (c *WindowConsumer) Client() *kgo.Client { return c.g.cl }

// Run polls, processes and marks records until ctx ends (returning ctx's
// error), Close is called (an error wrapping idem.ErrClosed), or the set
// fails or a record can neither be applied nor dead-lettered (an error;
// the partition's offsets are not marked, so its records are consumed
// again). Run may be called once.
func (c *WindowConsumer) Run(ctx context.Context) error { return c.g.run(ctx) }

// Close stops Run (waiting for it to return), commits the marked offsets
// while leaving the group, and closes the client.
func (c *WindowConsumer) Close() { c.g.close() }

// process settles one partition's records: duplicates by the set, the
// others by h, and records the applied keys before any is marked.
func (c *WindowConsumer) process(ctx context.Context, recs []*kgo.Record) (_ bool, err error) {
	ds := deliveries(recs)
	ctx, batch := c.g.cfg.StartBatch(ctx, len(ds))
	defer func() { batch.End(ctx, err) }()
	defer c.g.cfg.unsettled(ds, &err)
	decs, err := c.g.cfg.Window(ctx, c.s, recs[0].Topic, c.now(), where(recs[0]), ds, c.apply)
	if err != nil {
		return false, err // fail closed: nothing marked
	}
	for i := range ds {
		if err := c.g.settle(ctx, &ds[i], decs[i]); err != nil {
			return false, err
		}
		batch.Count(decs[i])
	}
	return true, nil
}

// apply runs h on d until a final decision, each run under a span of its
// own.
func (c *WindowConsumer) apply(ctx context.Context, d *delivery) (consume.Decision, error) {
	for {
		sctx := c.g.cfg.Start(ctx, d)
		err := c.h(sctx, d.Msg)
		dec := c.g.cfg.Decide(d, true, err)
		if dec.Outcome != idem.Retried {
			return dec, nil
		}
		if err := c.g.cfg.rerun(ctx, d, dec); err != nil {
			return consume.Decision{}, err
		}
	}
}
