package consumetest

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/inbox"
)

// PoisonIDs are the messages of the poison tests: four good ones and one
// that no handler can apply.
var PoisonIDs = []string{"good-1", "good-2", "poison", "good-3", "good-4"}

// Poison is the fixture of the poison-message tests: a set handler that
// fails on any group holding "poison", and a per-message handler that fails
// on it every time and counts its runs.
type Poison[M any] struct {
	id   func(M) string
	runs atomic.Int32
}

// NewPoison returns the fixture for messages whose id is id(m).
func NewPoison[M any](id func(M) string) *Poison[M] { return &Poison[M]{id: id} }

// Fail is the set handler's failure (settest.Recorder.Fail).
func (p *Poison[M]) Fail(msgs []M) error {
	for _, m := range msgs {
		if p.id(m) == "poison" {
			return errors.New("group holds poison")
		}
	}
	return nil
}

// Handler is the per-message handler: apply for the good messages, a
// failure for the poison one.
func (p *Poison[M]) Handler(apply func(context.Context, *sql.Tx, M) error) func(context.Context, *sql.Tx, M) error {
	return func(ctx context.Context, tx *sql.Tx, m M) error {
		if p.id(m) == "poison" {
			p.runs.Add(1)
			return errors.New("cannot parse amount")
		}
		return apply(ctx, tx, m)
	}
}

// Check checks the outcome: the four good messages applied once each (and
// reported Applied), the poison one run by the handler once per attempt,
// attempts times.
func (p *Poison[M]) Check(tb testing.TB, e *Effects, ev *Events[M], attempts int) {
	tb.Helper()
	got := e.Counts(tb)
	for _, k := range []string{"good-1", "good-2", "good-3", "good-4"} {
		if got[k] != 1 {
			tb.Errorf("%s applied %d times, want 1", k, got[k])
		}
	}
	if len(got) != 4 || ev.Count(idem.Applied) != 4 {
		tb.Errorf("effects %v, applied events %d; want the four good messages", got, ev.Count(idem.Applied))
	}
	if n := p.runs.Load(); n != int32(attempts) {
		tb.Errorf("the Handler ran %d times on the poison message, want %d (one per attempt)", n, attempts)
	}
}

// Broken is a set handler failure that a test switches off: while it is on,
// every group fails.
type Broken[M any] struct{ on atomic.Bool }

// NewBroken returns a Broken that is on.
func NewBroken[M any]() *Broken[M] {
	b := &Broken[M]{}
	b.on.Store(true)
	return b
}

// Fail is the set handler's failure (settest.Recorder.Fail).
func (b *Broken[M]) Fail([]M) error {
	if b.on.Load() {
		return errors.New("set broken")
	}
	return nil
}

// Fix switches the failure off.
func (b *Broken[M]) Fix() { b.on.Store(false) }

// WantNothingApplied checks the state while a set handler with no
// fallback fails: no effect, no Applied and no DeadLettered outcome, and
// every event is a retry carrying the *inbox.HandlerError (each is passed
// to more, if not nil, for the transport's own checks).
func WantNothingApplied[M any](tb testing.TB, e *Effects, ev *Events[M], more func(idem.DeliveryEvent[M])) {
	tb.Helper()
	if got := e.Counts(tb); len(got) != 0 || ev.Count(idem.Applied) != 0 || ev.Count(idem.DeadLettered) != 0 {
		tb.Fatalf("while the set handler fails: effects %v, applied %d, dead-lettered %d; want nothing",
			got, ev.Count(idem.Applied), ev.Count(idem.DeadLettered))
	}
	ev.Each(func(x idem.DeliveryEvent[M]) {
		var he *inbox.HandlerError
		if !errors.As(x.Err, &he) {
			tb.Errorf("retried event error %v, want an *inbox.HandlerError", x.Err)
		}
		if more != nil {
			more(x)
		}
	})
}

// WantAllAppliedOnce checks the end of a test in which every one of keys
// must be applied once and nothing dead-lettered.
func WantAllAppliedOnce[M any](tb testing.TB, e *Effects, ev *Events[M], keys []string) {
	tb.Helper()
	got := e.Counts(tb)
	for _, k := range keys {
		if got[k] != 1 {
			tb.Errorf("%s applied %d times, want 1", k, got[k])
		}
	}
	if ev.Count(idem.DeadLettered) != 0 {
		tb.Errorf("%d dead-lettered, want 0", ev.Count(idem.DeadLettered))
	}
}

// ApplyAfter is a handler that runs before(m) and, when it returns nil,
// apply: a test handler that fails where before says.
func ApplyAfter[M any](apply func(context.Context, *sql.Tx, M) error, before func(M) error) func(context.Context, *sql.Tx, M) error {
	return func(ctx context.Context, tx *sql.Tx, m M) error {
		if err := before(m); err != nil {
			return err
		}
		return apply(ctx, tx, m)
	}
}

// PoisonOrMalformed is the failure of the dead-letter tests' handler for
// the message id: "poison" always fails (retried, then dead-lettered at the
// last attempt), "malformed" fails permanently (dead-lettered at once), the
// others succeed.
func PoisonOrMalformed(id string) error {
	switch id {
	case "poison":
		return errors.New("cannot parse amount")
	case "malformed":
		return idem.Permanent(errors.New("schema v9 unknown"))
	}
	return nil
}

// The keys of the adapters' tracing tests: TracedKeys lists what they
// publish, TracedKey twice (the second copy must end as a duplicate) and
// FailingKey once, whose first runs fail ([FailFirst]).
const (
	TracedKey  = "order-traced-1"
	FailingKey = "order-fails-1"
)

// TracedKeys are the keys the tracing tests publish, in order.
var TracedKeys = []string{TracedKey, TracedKey, FailingKey}

// FailFirst returns a check for [ApplyAfter] that fails the first n runs
// of the message whose key(m) is FailingKey, and passes every other. An
// inbox runs a failing handler twice in one batch (the batch, then the
// message alone), so n = 2 makes the first delivery fail.
func FailFirst[M any](key func(M) string, n int32) func(M) error {
	var runs atomic.Int32
	return func(m M) error {
		if key(m) == FailingKey && runs.Add(1) <= n {
			return errors.New("ledger timeout")
		}
		return nil
	}
}
