package testenv

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/keystore"
)

// Parallel runs op b.N times in total on exactly c goroutines (not
// GOMAXPROCS multiples, as b.RunParallel does), so that a store's
// benchmarks compare variants at the same concurrency. Each call gets its
// own key: prefix followed by the call's number, 1 to b.N. The first error
// fails the benchmark and stops that goroutine.
func Parallel(b *testing.B, c int, prefix string, op func(key string) error) {
	var next atomic.Uint64
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	for range c {
		wg.Go(func() {
			for i := next.Add(1); i <= uint64(b.N); i = next.Add(1) {
				if err := op(prefix + strconv.FormatUint(i, 10)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// ReserveNew reserves key with a one-minute lease and returns an error
// unless the key was new, so that a benchmarked call takes the new-key path
// and a key that was not new is not counted as one.
func ReserveNew(ctx context.Context, s keystore.Store, key string) (keystore.Claim, error) {
	c, err := s.Reserve(ctx, key, nil, time.Minute)
	if err == nil && c.State != keystore.Acquired {
		err = fmt.Errorf("reserve %s: %v, want acquired", key, c.State)
	}
	return c, err
}

// ReserveComplete runs the whole protocol for one new key: [ReserveNew],
// then Complete with a small result kept for an hour.
func ReserveComplete(ctx context.Context, s keystore.Store, key string) error {
	c, err := ReserveNew(ctx, s, key)
	if err != nil {
		return err
	}
	return s.Complete(ctx, c, []byte("ok"), time.Hour)
}
