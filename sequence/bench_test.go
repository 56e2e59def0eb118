package sequence_test

import (
	"flag"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/testsupport/compactbench"
	"github.com/idem-go/idem/sequence"
)

// Benchmarks. One run shows the tracker beside a plain map baseline and the
// consumer-side marks beside a key table:
//
//	go test -run '^$' -bench . -benchtime 1x ./sequence              # ConsumerDedup at 1M messages
//	go test -run '^$' -bench ConsumerDedup -benchtime 1x ./sequence -args -dedupmsgs=10000000
//
// BenchmarkCheck reports ns/op and allocs/op (0 in steady state) and needs a
// time-based -benchtime (for example 1s) to be meaningful.

var dedupMsgs = flag.Int("dedupmsgs", 1_000_000, "messages per BenchmarkConsumerDedup run (10000000 for the 10M figure)")

// BenchmarkCheck measures Tracker.Check on the steady-state append path (100
// producers, each sending its next single-record batch) and on the duplicate
// path, beside a baseline that keeps only a map of last sequences behind a
// mutex: the least state that can tell "next" from "not next".
func BenchmarkCheck(b *testing.B) {
	const producers = 100
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	b.Run("tracker/append", func(b *testing.B) {
		tr, _ := sequence.NewTracker()
		batch := sequence.Batch{Timestamp: now}
		seqs := make([]int32, producers)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			p := i % producers
			batch.ProducerID, batch.FirstSeq, batch.LastSeq = int64(p), seqs[p], seqs[p]
			if _, err := tr.Check(batch, now); err != nil {
				b.Fatal(err)
			}
			seqs[p]++
		}
	})
	b.Run("tracker/duplicate", func(b *testing.B) {
		tr, _ := sequence.NewTracker()
		for p := range producers {
			for s := range int32(5) {
				if _, err := tr.Check(sequence.Batch{ProducerID: int64(p), FirstSeq: s, LastSeq: s, Timestamp: now}, now); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			s := int32(i % 5) // every cached batch, oldest to newest
			v, err := tr.Check(sequence.Batch{ProducerID: int64(i % producers), FirstSeq: s, LastSeq: s, Timestamp: now}, now)
			if err != nil || !v.Duplicate {
				b.Fatal(v, err)
			}
		}
	})
	b.Run("baseline-map/append", func(b *testing.B) {
		type key struct {
			producer  int64
			partition int32
		}
		var mu sync.Mutex
		last := map[key]int32{}
		seqs := make([]int32, producers)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			p := i % producers
			k := key{int64(p), 0}
			mu.Lock()
			if l, ok := last[k]; !ok || l+1 == seqs[p] {
				last[k] = seqs[p]
			}
			mu.Unlock()
			seqs[p]++
		}
	})
}

// mix64 is SplitMix64's finaliser: a cheap, deterministic stand-in for a
// random message id, so ids need not be stored outside the structure
// being measured.
func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

func msgID(i uint64) (id [16]byte) {
	a, c := mix64(2*i), mix64(2*i+1)
	for j := range 8 {
		id[j], id[8+j] = byte(a>>(8*j)), byte(c>>(8*j))
	}
	return id
}

// BenchmarkConsumerDedup compares the two ways a consumer can recognise
// redeliveries of *dedupmsgs messages from 100 producers (messages
// interleaved round-robin, each producer's sequence counting up): a key
// table holding every 16-byte message id, and one high-water mark per
// producer. It reports the heap each holds at the end (heapB/msg) and the
// time per message (ns/msg).
func BenchmarkConsumerDedup(b *testing.B) {
	const producers = 100
	n := *dedupMsgs
	b.Run("keytable-map16", func(b *testing.B) {
		measureHeld(b, n, func() any {
			seen := make(map[[16]byte]struct{})
			for i := range n {
				id := msgID(uint64(i))
				if _, dup := seen[id]; !dup {
					seen[id] = struct{}{}
				}
			}
			return seen
		})
	})
	b.Run("highwater-marks", func(b *testing.B) {
		measureHeld(b, n, func() any {
			h := sequence.NewHighWater()
			for i := range n {
				if _, err := h.Accept(int64(i%producers), 0, 0, int32(i/producers)); err != nil {
					b.Fatal(err)
				}
			}
			return h
		})
	})
}

// measureHeld runs build, which records n messages and returns what holds
// them, once per iteration, and reports the heap that value keeps
// (heapB/msg, heapB) and the time per message (ns/msg).
func measureHeld(b *testing.B, n int, build func() any) {
	for b.Loop() {
		before := compactbench.HeapInUse()
		start := time.Now()
		v := build()
		elapsed := time.Since(start)
		held := compactbench.HeapInUse() - before
		runtime.KeepAlive(v)
		b.ReportMetric(float64(held)/float64(n), "heapB/msg")
		b.ReportMetric(float64(elapsed.Nanoseconds())/float64(n), "ns/msg")
		b.ReportMetric(float64(held), "heapB")
	}
}
