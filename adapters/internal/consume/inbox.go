package consume

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/inbox"
)

// Handler applies one message inside the inbox transaction tx.
type Handler[T any] func(ctx context.Context, tx *sql.Tx, msg T) error

// SetHandler applies a batch's new messages together inside tx: msgs holds,
// in batch order, exactly the messages whose keys this transaction
// recorded (duplicates left out, never empty). With a per-message Handler
// as fallback, a failing SetHandler rolls the batch back and the batch runs
// again one message at a time, isolating the failing one; without it, the
// whole batch fails (nothing committed) and is retried.
type SetHandler[T any] func(ctx context.Context, tx *sql.Tx, msgs []T) error

// Inbox runs batches of deliveries through an inbox.
type Inbox[T any] struct {
	in   *inbox.Inbox
	h    Handler[T]
	cfg  *Config[T]
	each inbox.BatchHandler // nil without h
	set  inbox.SetHandler   // nil without cfg.Set
}

// NewInbox returns the core over in for cfg (validated here, once): h is
// the per-message handler, which may be nil when cfg.Set is given. cfg is
// read, not copied: the adapter keeps it alive and unchanged.
func NewInbox[T any](in *inbox.Inbox, h Handler[T], cfg *Config[T]) (*Inbox[T], error) {
	switch {
	case in == nil:
		return nil, cfg.Invalid("nil inbox")
	case h == nil && cfg.Set == nil:
		return nil, cfg.Invalid("nil handler (and no WithSetHandler)")
	case cfg.Key == nil:
		return nil, cfg.Invalid("nil key function")
	}
	if err := cfg.Backoff.Validate(); err != nil {
		return nil, cfg.Invalid("%v", err)
	}
	r := &Inbox[T]{in: in, h: h, cfg: cfg}
	if h != nil {
		r.each = func(ctx context.Context, tx *sql.Tx, m inbox.Message) (err error) {
			defer r.recoverPanic(&err)
			return h(ctx, tx, deliveryOf[T](m).Msg)
		}
	}
	if cfg.Set != nil {
		r.set = func(ctx context.Context, tx *sql.Tx, fresh []inbox.Message) (err error) {
			defer r.recoverPanic(&err)
			msgs := make([]T, len(fresh))
			for i, m := range fresh {
				msgs[i] = deliveryOf[T](m).Msg
			}
			return cfg.Set(ctx, tx, msgs)
		}
	}
	return r, nil
}

// deliveryOf is the one place where the core's own value comes back out of
// an inbox.Message: Process stores a *Delivery[T] there and nothing else.
func deliveryOf[T any](m inbox.Message) *Delivery[T] { return m.Value.(*Delivery[T]) }

// recoverPanic turns a handler's panic into its error, so that one poison
// message rolls back alone (and is retried, then dead-lettered) instead of
// killing the consumer with the transaction open.
func (r *Inbox[T]) recoverPanic(err *error) {
	if p := recover(); p != nil {
		r.cfg.Logger.Error(r.cfg.Name+": handler panicked", "panic", p, "stack", string(debug.Stack()))
		*err = fmt.Errorf("%s: handler panicked: %v", r.cfg.Name, p)
	}
}

// Process runs ds in one inbox transaction and returns one Decision per
// delivery, index for index. It first calls [Config.Prepare] on each
// delivery: those without a usable key or fingerprint are decided
// DeadLettered and kept out of the transaction.
//
// The error is non-nil when the transaction as a whole failed: nothing is
// committed (or, for an *inbox.CommitError, the outcome is unknown), so no
// delivery may be acknowledged. Its decisions are then Retried for every
// delivery that went in (attempt not counted against MaxAttempts); a set
// handler without a per-message fallback failing is such a failure, its
// error an *inbox.HandlerError. When ctx ended, Process returns only ctx's
// error and no decisions: the transport leaves the deliveries to the
// broker's redelivery.
//
// With a Tracer, the batch's span ends before Process returns; each
// delivery's span stays open until the transport reports its decision
// ([Config.Report]), except when ctx ended: those end as
// [OutcomeUnsettled].
func (r *Inbox[T]) Process(ctx context.Context, ds []Delivery[T]) ([]Decision, error) {
	ctx, batch := r.cfg.StartBatch(ctx, len(ds))
	decs, err := r.process(ctx, ds, &batch)
	batch.End(ctx, err)
	if decs == nil && err != nil {
		for i := range ds {
			r.cfg.Unsettled(&ds[i], err)
		}
	}
	return decs, err
}

// process is Process within the batch's span.
func (r *Inbox[T]) process(ctx context.Context, ds []Delivery[T], batch *Batch) ([]Decision, error) {
	decs := make([]Decision, len(ds))
	msgs := make([]inbox.Message, 0, len(ds))
	pos := make([]int, 0, len(ds))
	for i := range ds {
		r.cfg.Start(ctx, &ds[i])
		if dec, ok := r.cfg.Prepare(&ds[i]); !ok {
			decs[i] = dec
			continue
		}
		msgs = append(msgs, inbox.Message{Key: ds[i].Key, Fingerprint: ds[i].Fingerprint, Value: &ds[i]})
		pos = append(pos, i)
	}
	if len(msgs) == 0 {
		return decs, nil
	}
	var results []inbox.Result
	var err error
	if r.set != nil {
		results, err = r.in.ProcessBatchSet(ctx, msgs, r.set, r.each)
	} else {
		results, err = r.in.ProcessBatch(ctx, msgs, r.each)
	}
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return nil, cerr
		}
		for _, i := range pos {
			decs[i] = r.cfg.Retry(&ds[i], err)
		}
		return decs, err
	}
	for j, res := range results {
		i := pos[j]
		decs[i] = r.cfg.Decide(&ds[i], res.Applied, res.Err)
	}
	if batch.span != nil {
		for _, dec := range decs {
			batch.Count(dec)
		}
	}
	return decs, nil
}

// ProcessOne runs one delivery again, alone, in its own transaction: for a
// transport that retries in process (Kafka) rather than through the
// broker. d must have been through Process (its key is set). The per-message
// handler runs it when there is one, else the set handler. The error is
// non-nil, as for Process, when the transaction failed for a reason that is
// not the message's (the Decision is then Retried). With a Tracer, the run
// has a message span of its own ([Config.Start]; the inbox call nests under
// it), which the transport ends by reporting the decision, or which ends
// here as [OutcomeUnsettled] when ctx ended.
func (r *Inbox[T]) ProcessOne(ctx context.Context, d *Delivery[T]) (Decision, error) {
	ctx = r.cfg.Start(ctx, d)
	m := inbox.Message{Key: d.Key, Fingerprint: d.Fingerprint, Value: d}
	var applied bool
	var err error
	if r.each != nil {
		applied, err = r.in.ProcessMessage(ctx, m, func(ctx context.Context, tx *sql.Tx) error {
			return r.each(ctx, tx, m)
		})
	} else {
		var results []inbox.Result
		results, err = r.in.ProcessBatchSet(ctx, []inbox.Message{m}, r.set, nil)
		if err == nil {
			applied, err = results[0].Applied, results[0].Err
		}
	}
	var he *inbox.HandlerError
	switch {
	case err == nil, errors.As(err, &he), errors.Is(err, idem.ErrFingerprintMismatch):
		return r.cfg.Decide(d, applied, err), nil
	case ctx.Err() != nil:
		r.cfg.Unsettled(d, ctx.Err())
		return Decision{}, ctx.Err()
	}
	return r.cfg.Retry(d, err), err
}
