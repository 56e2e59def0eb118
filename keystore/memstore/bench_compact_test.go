package memstore_test

import (
	"context"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/testsupport/compactbench"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/memstore"
)

// BenchmarkCompact measures issue 16's memstore goal at 1M random UUIDv4
// keys, and at 10M too when IDEM_BENCH_10M=1: Reserve + Complete with an
// empty result (what keystore.Do with a nil result does), beside a Go
// map[[16]byte]int64 doing insert-if-absent, in the same run:
//
//	go test -run '^$' -bench Compact -benchtime 1x -count 3 ./keystore/memstore
//
// Each iteration fills a store from empty and reports heapB/key (live heap
// after runtime.GC, minus the heap before) and ns/key. "memstore-result"
// completes with an 8-byte result instead, so its keys stay in the map
// tier: the cost of a key with a result. "memstore-capacity" and
// "map-sized" are sized up front for the n keys (memstore.WithCapacity, a
// map's size hint): neither grows.
func BenchmarkCompact(b *testing.B) {
	sizes := map[int]string{1_000_000: "keys=1M"}
	if os.Getenv("IDEM_BENCH_10M") == "1" {
		sizes[10_000_000] = "keys=10M"
	}
	ctx := context.Background()
	for n, name := range sizes {
		strs, raws := compactbench.UUIDs(n)
		fill := func(b *testing.B, result []byte, opts ...memstore.Option) {
			for b.Loop() {
				before := compactbench.HeapInUse()
				start := compactbench.Start()
				s, err := memstore.New(append([]memstore.Option{memstore.WithMaxKeys(2 * n)}, opts...)...)
				if err != nil {
					b.Fatal(err)
				}
				for _, k := range strs {
					c, err := s.Reserve(ctx, k, nil, time.Minute)
					if err != nil || c.State != keystore.Acquired {
						b.Fatal(c.State, err)
					}
					if err := s.Complete(ctx, c, result, time.Hour); err != nil {
						b.Fatal(err)
					}
				}
				compactbench.Report(b, n, before, start, "ns/key")
				runtime.KeepAlive(s)
			}
		}
		idem := func() {
			b.Run(name+"/memstore", func(b *testing.B) { fill(b, nil) })
			b.Run(name+"/memstore-result", func(b *testing.B) { fill(b, []byte("result-8")) })
			b.Run(name+"/memstore-capacity", func(b *testing.B) { fill(b, nil, memstore.WithCapacity(n)) })
		}
		base := func() {
			b.Run(name+"/map", func(b *testing.B) { compactbench.Map(b, raws, "ns/key") })
			b.Run(name+"/map-sized", func(b *testing.B) { compactbench.MapSized(b, raws, "ns/key") })
		}
		// IDEM_BENCH_MAP_FIRST=1 runs the map first: alternate it from one
		// process (round) to the next, so neither side always meets the
		// heap the other left (-count repeats each side in a row).
		if os.Getenv("IDEM_BENCH_MAP_FIRST") != "1" {
			idem()
			base()
		} else {
			base()
			idem()
		}
	}
}
