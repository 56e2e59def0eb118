package idemotel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemotel"
	"github.com/idem-go/idem/internal/testsupport/dbtest"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/storetest"
)

// The wrapped store is still a store: the whole conformance suite passes
// through it, with every span recorded.
func TestWrapStoreConformance(t *testing.T) {
	r := newRecorder(t)
	t.Run("suite", func(t *testing.T) { // returns when its parallel subtests have
		storetest.Run(t, func(t *testing.T) keystore.Store {
			return idemotel.WrapStore(dbtest.MemStore(t), r.t)
		})
	})
	if len(r.named(idem.OpKeystoreReserve)) == 0 || len(r.named(idem.OpKeystoreExtend)) == 0 {
		t.Fatal("the suite's calls left no reserve or extend spans")
	}
}

func TestWrapStoreNil(t *testing.T) {
	m := dbtest.MemStore(t)
	if s := idemotel.WrapStore(m, nil); s != keystore.Store(m) {
		t.Fatalf("WrapStore(s, nil) = %T, want s", s)
	}
	if s := idemotel.WrapStore(nil, newRecorder(t).t); s != nil {
		t.Fatalf("WrapStore(nil, t) = %v", s)
	}
}

// The key secret-order-7f3a9c41 goes through every outcome of every traced
// call; each span says which, and none holds the key's text.
func TestWrapStoreOutcomes(t *testing.T) {
	r := newRecorder(t)
	ctx := context.Background()
	s := idemotel.WrapStore(dbtest.MemStore(t), r.t)
	sc, err := keystore.Scope(s, "tenant-a")
	if err != nil {
		t.Fatal(err)
	}
	const key = "secret-order-7f3a9c41"
	fp := []byte("fp-1")

	pctx, parent := r.t.Start(ctx, idem.OpHTTPRequest)
	c, err := sc.Reserve(pctx, key, fp, time.Minute) // reserved
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sc.Reserve(pctx, key, fp, time.Minute); err != nil { // in_progress
		t.Fatal(err)
	}
	if _, err := keystore.Extend(pctx, sc, c, time.Minute); err != nil { // extended
		t.Fatal(err)
	}
	stale := c
	stale.Token++
	if err := sc.Complete(pctx, stale, nil, time.Minute); !errors.Is(err, keystore.ErrLeaseLost) { // lease_lost
		t.Fatalf("stale complete: %v", err)
	}
	if _, err := keystore.Extend(pctx, sc, stale, time.Minute); !errors.Is(err, keystore.ErrLeaseLost) { // lease_lost
		t.Fatalf("stale extend: %v", err)
	}
	if err := sc.Release(pctx, stale); !errors.Is(err, keystore.ErrLeaseLost) { // lease_lost
		t.Fatalf("stale release: %v", err)
	}
	if err := sc.Complete(pctx, c, []byte("result"), time.Minute); err != nil { // completed
		t.Fatal(err)
	}
	if c2, err := sc.Reserve(pctx, key, fp, time.Minute); err != nil || c2.State != keystore.Done { // done
		t.Fatalf("replay: %v %v", c2.State, err)
	}
	if _, err := sc.Reserve(pctx, key, []byte("fp-2"), time.Minute); !errors.Is(err, idem.ErrFingerprintMismatch) { // mismatch
		t.Fatalf("mismatch: %v", err)
	}
	if _, err := sc.Reserve(pctx, "", fp, time.Minute); err == nil { // error
		t.Fatal("empty key accepted")
	}
	c3, err := s.Reserve(pctx, key, fp, time.Minute) // unscoped: another key
	if err != nil || c3.State != keystore.Acquired {
		t.Fatalf("unscoped: %v %v", c3.State, err)
	}
	if err := s.Release(pctx, c3); err != nil { // released
		t.Fatal(err)
	}
	parent.End("executed", nil)

	type want struct {
		op, outcome string
		failed      bool
	}
	wants := []want{
		{idem.OpKeystoreReserve, idemotel.OutcomeReserved, false},
		{idem.OpKeystoreReserve, idemotel.OutcomeInProgress, false},
		{idem.OpKeystoreExtend, idemotel.OutcomeExtended, false},
		{idem.OpKeystoreComplete, idemotel.OutcomeLeaseLost, true},
		{idem.OpKeystoreExtend, idemotel.OutcomeLeaseLost, true},
		{idem.OpKeystoreRelease, idemotel.OutcomeLeaseLost, true},
		{idem.OpKeystoreComplete, idemotel.OutcomeCompleted, false},
		{idem.OpKeystoreReserve, idemotel.OutcomeDone, false},
		{idem.OpKeystoreReserve, idemotel.OutcomeMismatch, false},
		{idem.OpKeystoreReserve, idemotel.OutcomeError, true},
		{idem.OpKeystoreReserve, idemotel.OutcomeReserved, false},
		{idem.OpKeystoreRelease, idemotel.OutcomeReleased, false},
	}
	spans := r.spans()
	if len(spans) != len(wants)+1 {
		t.Fatalf("%d spans, want %d", len(spans), len(wants)+1)
	}
	p := spans[len(spans)-1]
	for i, w := range wants {
		sp := spans[i]
		if sp.Name != w.op {
			t.Fatalf("span %d: %s, want %s", i, sp.Name, w.op)
		}
		wantAttr(t, sp, idem.AttrOutcome, w.outcome)
		if failed := sp.Status.Code == codes.Error; failed != w.failed {
			t.Errorf("span %d (%s %s): failed %v, want %v", i, w.op, w.outcome, failed, w.failed)
		}
		if sp.Parent.SpanID() != p.SpanContext.SpanID() {
			t.Errorf("span %d: not a child of the request span", i)
		}
		_, scoped := attr(sp, idem.AttrScope)
		if scoped != (i < 10) {
			t.Errorf("span %d: scope attribute %v, want %v", i, scoped, i < 10)
		}
		if i != 9 { // the empty key has no hash
			wantAttr(t, sp, idem.AttrKeyHash, idemotel.KeyHash(key))
		}
	}
	wantAttr(t, spans[0], idem.AttrScope, "tenant-a")
	noText(t, spans, key)
}

// A Reserve that takes over an expired lease says so.
func TestWrapStoreTakeover(t *testing.T) {
	r := newRecorder(t)
	ctx := context.Background()
	s := idemotel.WrapStore(dbtest.MemStore(t), r.t)
	if _, err := s.Reserve(ctx, "k", nil, 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(60 * time.Millisecond)
	if c, err := s.Reserve(ctx, "k", nil, time.Minute); err != nil || !c.Takeover {
		t.Fatalf("takeover: %+v %v", c, err)
	}
	spans := r.named(idem.OpKeystoreReserve)
	if _, ok := attr(spans[0], idem.AttrTakeover); ok {
		t.Fatal("first reservation marked as a takeover")
	}
	wantAttr(t, spans[1], idem.AttrTakeover, true)
}

// onlyStore is a store with none of the optional interfaces.
type onlyStore struct{ keystore.Store }

// The wrapper forwards what the wrapped store has and refuses, with
// errors.ErrUnsupported and no span, what it lacks; keystore.CanExtend sees
// through it.
func TestWrapStoreOptional(t *testing.T) {
	r := newRecorder(t)
	ctx := context.Background()
	full := idemotel.WrapStore(dbtest.MemStore(t), r.t)
	bare := idemotel.WrapStore(onlyStore{dbtest.MemStore(t)}, r.t)
	if !keystore.CanExtend(full) || keystore.CanExtend(bare) {
		t.Fatalf("CanExtend: full %v, bare %v", keystore.CanExtend(full), keystore.CanExtend(bare))
	}
	if !keystore.CanNotify(full) || keystore.CanNotify(bare) {
		t.Fatalf("CanNotify: full %v, bare %v", keystore.CanNotify(full), keystore.CanNotify(bare))
	}
	if _, stop, err := keystore.Notify(ctx, full, "k"); err != nil {
		t.Fatalf("Notify through the wrapper: %v", err)
	} else {
		stop()
	}
	if _, _, err := keystore.Notify(ctx, bare, "k"); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("notify on a bare store: %v, want ErrUnsupported", err)
	}
	c, err := full.Reserve(ctx, "k", nil, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := keystore.Inspect(ctx, full, "k"); err != nil {
		t.Fatal(err)
	}
	if keys, _, err := keystore.List(ctx, full, keystore.ListOptions{}); err != nil || len(keys) != 1 {
		t.Fatalf("list: %v %v", keys, err)
	}
	if err := full.Complete(ctx, c, nil, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := keystore.Forget(ctx, full, "k"); err != nil {
		t.Fatal(err)
	}
	if _, err := keystore.Sweep(ctx, full, 10); err != nil {
		t.Fatal(err)
	}
	n := len(r.spans())
	for name, err := range map[string]error{
		"extend":  second(keystore.Extend(ctx, bare, c, time.Minute)),
		"sweep":   second(keystore.Sweep(ctx, bare, 1)),
		"inspect": second(keystore.Inspect(ctx, bare, "k")),
		"forget":  keystore.Forget(ctx, bare, "k"),
		"scope":   second(keystore.Scope(bare, "x")),
	} {
		if !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("%s on a bare store: %v, want ErrUnsupported", name, err)
		}
	}
	if _, _, err := keystore.List(ctx, bare, keystore.ListOptions{}); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("list on a bare store: %v", err)
	}
	if got := len(r.spans()); got != n {
		t.Fatalf("unsupported calls made %d spans", got-n)
	}
}

func second[T any](_ T, err error) error { return err }
