package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/internal/tracing"
)

func TestWithTracerRejectsNil(t *testing.T) {
	db, _ := openSQLite(t)
	if _, err := inbox.New(db, backends[0].d, "c", inbox.WithTracer(nil)); !errors.Is(err, idem.ErrInvalidOption) {
		t.Fatalf("WithTracer(nil): %v, want ErrInvalidOption", err)
	}
}

// wantSpan fails unless s ended once with outcome and attrs.
func wantSpan(t *testing.T, s tracing.Recorded, op, outcome string, attrs map[string]any) {
	t.Helper()
	if s.Op != op || s.Result != outcome || s.Ended != 1 {
		t.Fatalf("span %s ended %d times with %q, want %s ended once with %q", s.Op, s.Ended, s.Result, op, outcome)
	}
	for k, v := range attrs {
		if s.Attrs[k] != v {
			t.Fatalf("span %s: %s = %v, want %v (all: %v)", s.Op, k, s.Attrs[k], v, s.Attrs)
		}
	}
}

// Each outcome of Process on every backend: its span, its attributes, and
// the handler's own span nested under it.
func TestTraceProcess(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		rec := &tracing.Recorder{}
		e := setup(t, b, inbox.WithTracer(rec))
		ctx, parent := rec.Start(context.Background(), idem.OpConsume)
		handler := func(ctx context.Context, tx *sql.Tx) error {
			_, s := rec.Start(ctx, "handler")
			defer s.End("ok", nil)
			return e.credit(1, 10)(ctx, tx)
		}
		if _, err := e.in.ProcessMessage(ctx, inbox.Message{Key: "evt-1", Fingerprint: []byte("a")}, handler); err != nil {
			t.Fatal(err)
		}
		if _, err := e.in.ProcessMessage(ctx, inbox.Message{Key: "evt-1", Fingerprint: []byte("a")}, handler); err != nil {
			t.Fatal(err)
		}
		if _, err := e.in.ProcessMessage(ctx, inbox.Message{Key: "evt-1", Fingerprint: []byte("b")}, handler); !errors.Is(err, idem.ErrFingerprintMismatch) {
			t.Fatalf("mismatch: %v", err)
		}
		boom := errors.New("boom")
		if _, err := e.in.Process(ctx, "evt-2", func(context.Context, *sql.Tx) error { return boom }); !errors.Is(err, boom) {
			t.Fatalf("handler error: %v", err)
		}
		if _, err := e.in.Process(ctx, "", handler); err == nil {
			t.Fatal("empty key accepted")
		}
		parent.End("applied", nil)

		spans := rec.Named(idem.OpInboxProcess)
		if len(spans) != 4 {
			t.Fatalf("%d process spans, want 4 (none for the refused key)", len(spans))
		}
		base := map[string]any{idem.AttrConsumer: "wallet-consumer", idem.AttrTxAttempt: 1}
		for i, outcome := range []string{"applied", "duplicate", "mismatch", "error"} {
			wantSpan(t, spans[i], idem.OpInboxProcess, outcome, base)
			if spans[i].Parent != 1 {
				t.Errorf("span %d: parent %d, want the consume span", i, spans[i].Parent)
			}
		}
		if spans[0].Key != "evt-1" || spans[3].Key != "evt-2" {
			t.Fatalf("keys %q, %q", spans[0].Key, spans[3].Key)
		}
		if spans[2].Err != nil || !errors.Is(spans[3].Err, boom) {
			t.Fatalf("errors: mismatch %v, handler %v", spans[2].Err, spans[3].Err)
		}
		h := rec.Named("handler")
		if len(h) != 1 || h[0].Parent != spans[0].ID {
			t.Fatalf("handler spans %+v: want one, under the call that applied", h)
		}
		for _, s := range rec.Spans() {
			for k, v := range s.Attrs {
				if v == "evt-1" || v == "evt-2" {
					t.Fatalf("span %s: attribute %s holds the key", s.Op, k)
				}
			}
		}
	})
}

// A retried transaction shows in idem.tx.attempts.
func TestTraceRetries(t *testing.T) {
	rec := &tracing.Recorder{}
	e := setup(t, backends[2], inbox.WithRetry(5, time.Millisecond, 5*time.Millisecond), inbox.WithTracer(rec))
	calls := 0
	if _, err := e.in.Process(context.Background(), "evt-1", func(ctx context.Context, tx *sql.Tx) error {
		if calls++; calls < 3 {
			return retryableErr{}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.in.ProcessBatch(context.Background(), []inbox.Message{{Key: "b-1"}}, func(context.Context, *sql.Tx, inbox.Message) error {
		if calls++; calls < 5 {
			return retryableErr{}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	wantSpan(t, rec.Named(idem.OpInboxProcess)[0], idem.OpInboxProcess, "applied", map[string]any{idem.AttrTxAttempt: 3})
	wantSpan(t, rec.Named(idem.OpInboxProcessBatch)[0], idem.OpInboxProcessBatch, "committed", map[string]any{idem.AttrTxAttempt: 2})
}

// A batch's span counts what happened to its messages; the handlers run
// under it.
func TestTraceBatch(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		rec := &tracing.Recorder{}
		e := setup(t, b, inbox.WithTracer(rec))
		ctx := context.Background()
		if _, err := e.in.Process(ctx, "old", e.credit(1, 1)); err != nil {
			t.Fatal(err)
		}
		rec.Reset()
		msgs := []inbox.Message{{Key: "old"}, {Key: "new-1"}, {Key: "bad"}, {Key: ""}, {Key: "new-2"}}
		each := func(ctx context.Context, tx *sql.Tx, m inbox.Message) error {
			_, s := rec.Start(ctx, "handler")
			defer s.End("ok", nil)
			if m.Key == "bad" {
				return errors.New("refused")
			}
			return e.credit(1, 1)(ctx, tx)
		}
		if _, err := e.in.ProcessBatch(ctx, msgs, each); err != nil {
			t.Fatal(err)
		}
		counts := map[string]any{idem.AttrConsumer: "wallet-consumer", idem.AttrBatchSize: 5, idem.AttrApplied: 2, idem.AttrDuplicate: 1, idem.AttrFailed: 2}
		bs := rec.Named(idem.OpInboxProcessBatch)
		if len(bs) != 1 {
			t.Fatalf("%d batch spans", len(bs))
		}
		wantSpan(t, bs[0], idem.OpInboxProcessBatch, "committed", counts)
		for _, h := range rec.Named("handler") {
			if h.Parent != bs[0].ID {
				t.Fatalf("handler span under %d, want the batch span %d", h.Parent, bs[0].ID)
			}
		}

		rec.Reset()
		set := func(ctx context.Context, tx *sql.Tx, fresh []inbox.Message) error {
			return e.credit(2, int64(len(fresh)))(ctx, tx)
		}
		if _, err := e.in.ProcessBatchSet(ctx, []inbox.Message{{Key: "new-1"}, {Key: "s-1"}, {Key: "s-2"}}, set, nil); err != nil {
			t.Fatal(err)
		}
		failing := func(context.Context, *sql.Tx, []inbox.Message) error { return errors.New("set failed") }
		if _, err := e.in.ProcessBatchSet(ctx, []inbox.Message{{Key: "s-3"}}, failing, nil); err == nil {
			t.Fatal("failing set handler: no error")
		}
		ss := rec.Named(idem.OpInboxProcessBatchSet)
		if len(ss) != 2 {
			t.Fatalf("%d batch-set spans", len(ss))
		}
		wantSpan(t, ss[0], idem.OpInboxProcessBatchSet, "committed", map[string]any{idem.AttrBatchSize: 3, idem.AttrApplied: 2, idem.AttrDuplicate: 1, idem.AttrFailed: 0})
		wantSpan(t, ss[1], idem.OpInboxProcessBatchSet, "error", map[string]any{idem.AttrBatchSize: 1})
		if ss[1].Err == nil {
			t.Fatal("failed batch span has no error")
		}
	})
}

// Concurrent deliveries of one key: one span per call, each ended once,
// exactly one applied.
func TestTraceConcurrent(t *testing.T) {
	rec := &tracing.Recorder{}
	e := setup(t, backends[0], inbox.WithTracer(rec))
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			key := fmt.Sprintf("evt-%d", i%2)
			if _, err := e.in.Process(context.Background(), key, e.credit(1, 1)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	spans := rec.Named(idem.OpInboxProcess)
	applied := 0
	for _, s := range spans {
		if s.Ended != 1 {
			t.Fatalf("span ended %d times", s.Ended)
		}
		if s.Result == "applied" {
			applied++
		}
	}
	if len(spans) != 16 || applied != 2 {
		t.Fatalf("%d spans, %d applied; want 16, 2", len(spans), applied)
	}
	e.wantBalance(1, 2)
}
