//go:build linux && (amd64 || arm64)

package diskwindow

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
)

// BenchmarkColdReads reads random 4 KiB blocks of a 1 GiB file whose page
// cache was dropped, in batches of 128 as probeSealed reads a batch's
// blocks: "willneed" starts every read of a batch with POSIX_FADV_WILLNEED
// and then reads them in turn from one goroutine (what probeSealed does on
// Linux); "goroutines" reads them from 32 goroutines blocked in pread at
// once (what it does elsewhere, and did here before). One read an op;
// cpu-ns/read is the process's CPU time a read. Run it alternating, for
// example: go test -run '^$' -bench ColdReads -benchtime 40000x -count 3
// ./window/diskwindow (IDEM_DEDUP_DIR puts the file on another disk).
func BenchmarkColdReads(b *testing.B) {
	dir := b.TempDir()
	if v := os.Getenv("IDEM_DEDUP_DIR"); v != "" {
		dir = v
	}
	path := filepath.Join(dir, "cold-reads.bin")
	const size = 1 << 30
	writeFile(b, path, size)
	defer os.Remove(path)
	const batch = 128
	run := func(b *testing.B, read func(f *os.File, offs []int64)) {
		if err := dropCache(path); err != nil {
			b.Fatal(err)
		}
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		adviseRandom(f)
		r := rand.New(rand.NewPCG(uint64(b.N), 9))
		offs := make([]int64, batch)
		b.ResetTimer()
		cpu0 := cpuTime()
		for done := 0; done < b.N; done += batch {
			part := offs[:min(batch, b.N-done)]
			for i := range part {
				part[i] = r.Int64N(size/blockSize) * blockSize
			}
			read(f, part)
		}
		b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/read")
	}
	b.Run("willneed", func(b *testing.B) {
		buf := make([]byte, blockSize)
		run(b, func(f *os.File, offs []int64) {
			for _, o := range offs {
				if !willNeed(f, o, blockSize) {
					b.Fatal("POSIX_FADV_WILLNEED refused")
				}
			}
			for _, o := range offs {
				if _, err := f.ReadAt(buf, o); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("goroutines", func(b *testing.B) {
		run(b, func(f *os.File, offs []int64) {
			var wg sync.WaitGroup
			var next atomic.Int64
			for range min(len(offs), maxReaders) {
				wg.Go(func() {
					buf := make([]byte, blockSize)
					for k := next.Add(1) - 1; k < int64(len(offs)); k = next.Add(1) - 1 {
						if _, err := f.ReadAt(buf, offs[k]); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
		})
	})
}

// writeFile writes size bytes of random data to path and fsyncs it.
func writeFile(b *testing.B, path string, size int) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	r := rand.New(rand.NewPCG(1, 2))
	chunk := make([]byte, 1<<20)
	for done := 0; done < size; done += len(chunk) {
		for i := 0; i < len(chunk); i += 8 {
			v := r.Uint64()
			for j := range 8 {
				chunk[i+j] = byte(v >> (8 * j))
			}
		}
		if _, err := f.Write(chunk); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
}
