package consume

import (
	"context"
	"fmt"
	"time"

	"github.com/idem-go/idem"
)

// DedupSet remembers keys for a horizon, recording a key only when told
// to (*diskwindow.Set is one): SeenBatch answers, for each id in scope,
// whether it was recorded less than the horizon ago, without recording;
// AddBatch records the new ones, durably, before it returns. The adapters'
// public DedupSet interfaces have the same methods.
type DedupSet interface {
	SeenBatch(ctx context.Context, scope string, ids []string, now time.Time, dups []bool) ([]bool, error)
	AddBatch(ctx context.Context, scope string, ids []string, now time.Time, dups []bool) ([]bool, error)
}

// Window decides a batch of deliveries through the dedup set s, for a
// transport whose effects are idempotent downstream and need no inbox
// (the adapters' window consumers), and returns one Decision per delivery,
// index for index:
//
//   - a delivery without a usable key ([Config.Prepare]) is DeadLettered;
//   - the others' keys are looked up in s, in scope, at now (SeenBatch): a
//     key s holds, or one applied earlier in this batch, is a Duplicate and
//     its handler does not run;
//   - apply runs each other delivery, in batch order, and returns its
//     decision (it starts the delivery's span; a transport that retries in
//     process loops inside it);
//   - the keys of the deliveries decided Applied are recorded in s in one
//     AddBatch. A delivery retried or dead-lettered is never recorded, so a
//     failed handler never hides a message.
//
// The error is non-nil when s failed (SeenBatch or AddBatch, wrapped with
// the adapter's name and where, which names the batch's source) or apply
// returned one (as it is). Then no decision is returned and no delivery of
// ds may be acknowledged: the transport fails closed, and the deliveries
// come again. Spans still open are the transport's to end.
func (c *Config[T]) Window(ctx context.Context, s DedupSet, scope string, now time.Time, where string, ds []Delivery[T],
	apply func(context.Context, *Delivery[T]) (Decision, error)) ([]Decision, error) {
	decs := make([]Decision, len(ds))
	var keys []string
	var keyed []int // ds index of keys[j]
	for i := range ds {
		dec, ok := c.Prepare(&ds[i])
		if !ok {
			c.Start(ctx, &ds[i])
			decs[i] = dec
			continue
		}
		keys = append(keys, ds[i].Key)
		keyed = append(keyed, i)
	}
	if len(keys) == 0 {
		return decs, nil
	}
	held, err := s.SeenBatch(ctx, scope, keys, now, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: dedup set: %w", c.Name, where, err)
	}
	applied := map[string]bool{}
	var record []string
	for j, i := range keyed {
		d := &ds[i]
		if held[j] || applied[d.Key] {
			c.Start(ctx, d)
			decs[i] = c.Decide(d, false, nil) // Duplicate
			continue
		}
		if decs[i], err = apply(ctx, d); err != nil {
			return nil, err
		}
		if decs[i].Outcome == idem.Applied {
			applied[d.Key] = true
			record = append(record, d.Key)
		}
	}
	if len(record) > 0 {
		if _, err := s.AddBatch(ctx, scope, record, now, nil); err != nil {
			return nil, fmt.Errorf("%s: %s: recording %d keys in the dedup set: %w", c.Name, where, len(record), err)
		}
	}
	return decs, nil
}
