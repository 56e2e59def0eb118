package window_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/idem-go/idem/window"
)

// TestAddBatchMatchesAdd answers random batches (repeats inside a batch,
// ids over MaxKeyLen, a full Dedup, time moving on between batches, batch
// sizes around the 16-id groups) with AddBatch on one Dedup and with Add,
// id by id, on another: every Result must be what Add returned.
func TestAddBatchMatchesAdd(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", window.MaxKeyLen)
	rapid.Check(t, func(rt *rapid.T) {
		max := rapid.IntRange(1, 60).Draw(rt, "max")
		one, _ := window.New(time.Second, window.WithMaxEntries(max))
		batched, _ := window.New(time.Second, window.WithMaxEntries(max))
		now := time.Unix(1_700_000_000, 0)
		var out []window.Result
		for range rapid.IntRange(1, 30).Draw(rt, "batches") {
			now = now.Add(time.Duration(rapid.IntRange(0, 400).Draw(rt, "ms")) * time.Millisecond)
			ids := rapid.SliceOfN(rapid.IntRange(0, 80), 0, 40).Draw(rt, "ids")
			batch := make([]string, len(ids))
			for i, n := range ids {
				batch[i] = fmt.Sprint("id-", n)
				if n == 80 {
					batch[i] = long
				}
			}
			out = batched.AddBatch("s", batch, now, out[:0])
			if len(out) != len(batch) {
				rt.Fatalf("%d results for %d ids", len(out), len(batch))
			}
			for i, id := range batch {
				dup, orig, err := one.Add("s", id, now)
				r := out[i]
				if r.Dup != dup || r.Original != orig || !sameErr(r.Err, err) {
					rt.Fatalf("id %d (%.10s): AddBatch %+v, Add (%v, %d, %v)", i, id, r, dup, orig, err)
				}
			}
		}
	})
}

func sameErr(a, b error) bool {
	for _, e := range []error{window.ErrFull, window.ErrTooLong} {
		if errors.Is(a, e) != errors.Is(b, e) {
			return false
		}
	}
	return (a == nil) == (b == nil)
}

// TestAddBatchConcurrent sends the same ids in batches from several
// goroutines at once, in different orders: each id is accepted exactly
// once, and every other answer names that acceptance's sequence.
func TestAddBatchConcurrent(t *testing.T) {
	t.Parallel()
	d, _ := window.New(time.Hour)
	const workers, n = 4, 3000
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprint("m-", i)
	}
	now := time.Now()
	results := make([][]window.Result, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			order := ids
			if w%2 == 1 { // reversed: batches meet in the middle
				order = make([]string, n)
				for i := range ids {
					order[i] = ids[n-1-i]
				}
			}
			var out []window.Result
			for i := 0; i < n; i += 37 {
				out = d.AddBatch("s", order[i:min(i+37, n)], now, out)
			}
			if w%2 == 1 {
				for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
					out[i], out[j] = out[j], out[i]
				}
			}
			results[w] = out
		}()
	}
	wg.Wait()
	for i := range ids {
		accepted, seq := 0, uint64(0)
		for w := range workers {
			r := results[w][i]
			if r.Err != nil {
				t.Fatalf("id %d: %v", i, r.Err)
			}
			if !r.Dup {
				accepted++
			}
			if seq == 0 {
				seq = r.Original
			} else if r.Original != seq {
				t.Fatalf("id %d: sequences %d and %d", i, seq, r.Original)
			}
		}
		if accepted != 1 {
			t.Fatalf("id %d accepted %d times", i, accepted)
		}
	}
}
