package memstore_test

import (
	"context"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

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
// tier: the cost of a key with a result.
func BenchmarkCompact(b *testing.B) {
	sizes := map[int]string{1_000_000: "keys=1M"}
	if os.Getenv("IDEM_BENCH_10M") == "1" {
		sizes[10_000_000] = "keys=10M"
	}
	ctx := context.Background()
	for n, name := range sizes {
		// One allocation for every key string, so that the garbage
		// collector does not mark n objects in every cycle of the run.
		var all strings.Builder
		all.Grow(36 * n)
		raws := make([][16]byte, n)
		for i := range n {
			u := uuid.New()
			raws[i] = u
			all.WriteString(u.String())
		}
		joined := all.String()
		strs := make([]string, n)
		for i := range strs {
			strs[i] = joined[36*i : 36*i+36]
		}
		fill := func(b *testing.B, result []byte) {
			for b.Loop() {
				before := heapNow()
				start := time.Now()
				s, err := memstore.New(memstore.WithMaxKeys(2 * n))
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
				report(b, n, before, start)
				runtime.KeepAlive(s)
			}
		}
		b.Run(name+"/memstore", func(b *testing.B) { fill(b, nil) })
		b.Run(name+"/memstore-result", func(b *testing.B) { fill(b, []byte("result-8")) })
		b.Run(name+"/map", func(b *testing.B) {
			for b.Loop() {
				before := heapNow()
				start := time.Now()
				m := map[[16]byte]int64{}
				for i, k := range raws {
					if _, ok := m[k]; ok {
						b.Fatal("duplicate")
					}
					m[k] = int64(i)
				}
				report(b, n, before, start)
				runtime.KeepAlive(m)
			}
		})
	}
}

func heapNow() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

func report(b *testing.B, n int, before uint64, start time.Time) {
	elapsed := time.Since(start)
	held := heapNow() - before
	b.ReportMetric(float64(held)/float64(n), "heapB/key")
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(n), "ns/key")
}
