package keystore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/idem-go/idem/keystore"
)

// An effect that takes longer than its lease: Do renews the lease while the
// effect runs (the store implements keystore.Extender), so a retry that
// arrives meanwhile finds the key in progress instead of running the effect
// a second time.
func ExampleKeepAlive() {
	ctx := context.Background()
	s := newLeaseStore() // any store that implements keystore.Extender
	lease := time.Second

	c, err := s.Reserve(ctx, "report-2026-12", nil, lease)
	if err != nil {
		fmt.Println(err)
		return
	}
	actx, stop := keystore.KeepAlive(ctx, s, c, lease)
	time.Sleep(2 * lease) // the slow effect, under actx
	retry, _ := s.Reserve(ctx, "report-2026-12", nil, lease)
	fmt.Println("while it ran, a retry saw:", retry.State, "; effect cancelled:", actx.Err() != nil)
	c, err = stop() // before Complete: no renewal races it
	fmt.Println("lease lost:", err != nil)
	if err := s.Complete(ctx, c, []byte("done"), time.Hour); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("completed")
	// Output:
	// while it ran, a retry saw: in_progress ; effect cancelled: false
	// lease lost: false
	// completed
}

// Do renews by itself when the store can; it also cancels the effect's
// context if the lease is lost.
func ExampleExtender() {
	ctx := context.Background()
	s := newLeaseStore()
	res, _, err := keystore.Do(ctx, s, "slow-job", nil, func(ctx context.Context) ([]byte, error) {
		select {
		case <-time.After(2500 * time.Millisecond): // two and a half leases
			return []byte("finished"), nil
		case <-ctx.Done():
			return nil, context.Cause(ctx) // wraps keystore.ErrLeaseLost
		}
	}, keystore.WithLease(time.Second))
	fmt.Println(string(res), err)
	// Output: finished <nil>
}
