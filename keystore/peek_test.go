package keystore_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/testsupport/dbtest"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/storetest"
)

// peeking forwards to a store and its Notifier, counting Reserves, with a
// Peek read from Inspect, counted; decline makes every Peek decline. It
// has no Unwrap: the store below cannot peek, and keystore.As would say
// so.
type peeking struct {
	keystore.Store
	reserves, peeks, answered atomic.Int64
	decline                   bool
}

func (p *peeking) Reserve(ctx context.Context, key string, fp []byte, lease time.Duration) (keystore.Claim, error) {
	p.reserves.Add(1)
	return p.Store.Reserve(ctx, key, fp, lease)
}

func (p *peeking) Notify(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	return keystore.Notify(ctx, p.Store, key)
}

func (p *peeking) Peek(ctx context.Context, key string, fp []byte) (keystore.Claim, bool) {
	p.peeks.Add(1)
	k, err := keystore.Inspect(ctx, p.Store, key)
	if p.decline || err != nil || k.State != keystore.Done {
		return keystore.Claim{}, false
	}
	p.answered.Add(1)
	return keystore.Claim{Key: key, State: keystore.Done, Result: k.Result, Expires: k.Expires}, true
}

// TestAwaitPeeksAfterWaking: a waiter woken by the completion is answered
// by Peek, with no Reserve after its sleep; the first look of all is a
// Reserve (a new key must be taken, not read). A Peek that declines is
// followed by the Reserve that answers.
func TestAwaitPeeksAfterWaking(t *testing.T) {
	for _, decline := range []bool{false, true} {
		s := dbtest.MemStore(t)
		p := &peeking{Store: s, decline: decline}
		ctx := context.Background()
		holder, err := s.Reserve(ctx, "k", nil, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		done := storetest.AwaitResult(ctx, p, "k", "r")
		// Reserve, subscribe, Peek (in progress: declined), Reserve, sleep.
		testenv.WaitFor(t, time.Minute, "two Reserves", func() bool { return p.reserves.Load() >= 2 })
		if n := p.peeks.Load(); n != 1 {
			t.Fatalf("decline=%v: %d Peeks before the sleep, want 1 (the first look reserves)", decline, n)
		}
		if err := s.Complete(ctx, holder, []byte("r"), time.Hour); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		wantReserves, wantAnswered := int64(2), int64(1)
		if decline {
			wantReserves, wantAnswered = 3, 0
		}
		if r, a := p.reserves.Load(), p.answered.Load(); r != wantReserves || a != wantAnswered {
			t.Fatalf("decline=%v: %d Reserves and %d Peeks answered, want %d and %d", decline, r, a, wantReserves, wantAnswered)
		}
	}
}
