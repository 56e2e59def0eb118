package keystore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/testsupport/dbtest"
	"github.com/idem-go/idem/keystore"
)

// halfway is a store whose Reserve behaves as database/sql does when ctx is
// cancelled while a statement runs: the write lands, and the call still
// reports ctx's error. cancelDuring, if set, is the caller's cancellation,
// fired while Reserve runs.
type halfway struct {
	keystore.Store
	cancelDuring func()
	reserves     atomic.Int32
}

func (h *halfway) Reserve(ctx context.Context, key string, fp []byte, lease time.Duration) (keystore.Claim, error) {
	h.reserves.Add(1)
	c, err := h.Store.Reserve(context.WithoutCancel(ctx), key, fp, lease)
	if h.cancelDuring != nil {
		h.cancelDuring()
	}
	if ctx.Err() != nil {
		return keystore.Claim{}, ctx.Err()
	}
	return c, err
}

// TestDoCancelledDuringReserve: the caller's ctx ends while Reserve runs.
// Do must neither run fn nor leave the key in progress for a whole lease
// (which a Reserve cut half-way did: the store took the key and Do, told
// context.Canceled, never released it).
func TestDoCancelledDuringReserve(t *testing.T) {
	mem := dbtest.MemStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := &halfway{Store: mem, cancelDuring: cancel}
	ran := false
	_, _, err := keystore.Do(ctx, s, "k", nil, func(context.Context) ([]byte, error) {
		ran = true
		return nil, nil
	}, keystore.WithLease(time.Hour))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Do: %v, want context.Canceled", err)
	}
	if ran {
		t.Fatal("fn ran although ctx ended before it could start")
	}
	c, err := mem.Reserve(context.Background(), "k", nil, time.Minute)
	if err != nil || c.State != keystore.Acquired {
		t.Fatalf("after the cancelled Do the key is %v (%v): held for a whole lease by nobody", c.State, err)
	}
}

// TestDoCancelledBefore: a ctx that ended before Do touches no store.
func TestDoCancelledBefore(t *testing.T) {
	s := &halfway{Store: dbtest.MemStore(t)}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err := keystore.Do(ctx, s, "k", nil, func(context.Context) ([]byte, error) {
		t.Error("fn ran under a cancelled ctx")
		return nil, nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Do: %v, want context.Canceled", err)
	}
	if n := s.reserves.Load(); n != 0 {
		t.Fatalf("Do called Reserve %d times under a cancelled ctx", n)
	}
}
