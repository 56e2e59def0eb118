package diskwindow

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/uuidtext"
	"github.com/idem-go/idem/window"
)

// TestDedupDiskCurve adds IDEM_DEDUP_IDS random UUIDs (default 200k; `make
// bench-dedup-disk` runs 2×10⁸) in batches of 4096 at 100k ids a second of
// simulated time, every IDEM_DEDUP_STEP (default a tenth), with the page
// cache of the sealed files dropped before each step, and the in-memory
// window.Dedup on the same ids beside it. It prints a line a step, single
// Add rates, the time to reopen the set, and a last line of totals. With
// IDEM_DEDUP_REOPEN_AT (say 1e8) it also closes the set at the first step
// that reaches that many ids, drops the page cache of all its files
// (journal included), times Open, and goes on with the reopened set. It
// asserts no speed: only that every id was new and every id re-added a
// duplicate. With IDEM_DEDUP_CPUPROFILE=prefix it writes a CPU profile of
// the set's adds (the window's left out) for each step that starts at or
// after IDEM_DEDUP_PROFILE_FROM ids (default 0), to prefix.<ids>.
func TestDedupDiskCurve(t *testing.T) {
	n, step := 200_000, 0
	if v := os.Getenv("IDEM_DEDUP_IDS"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatalf("IDEM_DEDUP_IDS=%q: %v", v, err)
		}
		n = int(f)
	}
	if v := os.Getenv("IDEM_DEDUP_STEP"); v != "" {
		f, _ := strconv.ParseFloat(v, 64)
		step = int(f)
	}
	if step <= 0 {
		step = max(n/10, 1)
	}
	maxOpen := defaultMaxOpen
	if n < 10_000_000 {
		maxOpen = max(n/7, 1000) // a few seals in the short run too
	}
	if v := os.Getenv("IDEM_DEDUP_MAXOPEN"); v != "" {
		f, _ := strconv.ParseFloat(v, 64)
		maxOpen = int(f)
	}
	reopenAt := 0
	if v := os.Getenv("IDEM_DEDUP_REOPEN_AT"); v != "" {
		f, _ := strconv.ParseFloat(v, 64)
		reopenAt = int(f)
	}
	profile := os.Getenv("IDEM_DEDUP_CPUPROFILE")
	profileFrom := 0
	if v := os.Getenv("IDEM_DEDUP_PROFILE_FROM"); v != "" {
		f, _ := strconv.ParseFloat(v, 64)
		profileFrom = int(f)
	}
	dir := t.TempDir()
	if v := os.Getenv("IDEM_DEDUP_DIR"); v != "" {
		dir = filepath.Join(v, fmt.Sprintf("curve-%d", time.Now().UnixNano()))
		defer os.RemoveAll(dir)
	}
	const horizon = 24 * time.Hour
	opts := []Option{WithMaxOpen(maxOpen)}
	if os.Getenv("IDEM_DEDUP_NOMERGE") != "" {
		opts = append(opts, withoutMerge()) // the baseline: a file a generation
	}
	s, err := Open(dir, horizon, opts...)
	if err != nil {
		t.Fatal(err)
	}
	w, err := window.New(horizon)
	if err != nil {
		t.Fatal(err)
	}
	var csv *os.File
	if p := os.Getenv("IDEM_DEDUP_CSV"); p != "" {
		if csv, err = os.Create(p); err != nil {
			t.Fatal(err)
		}
		defer csv.Close()
		fmt.Fprintln(csv, "ids,adds_per_s,window_adds_per_s,disk_B_per_id,mem_B_per_id,generations,adds_per_cpu_s,window_adds_per_cpu_s,files")
	}
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	ctx := context.Background()
	clock := func(i int) time.Time { return t0.Add(time.Duration(i) * 10 * time.Microsecond) }
	const batch = 4096
	var diskTime, winTime, diskCPU, winCPU time.Duration
	var first, last float64
	var sample []string // a few ids of every step, re-added at the end
	dups := make([]bool, 0, batch)
	var res []window.Result
	for done := 0; done < n; {
		k := min(step, n-done)
		ids := uuids(r, k)
		sample = append(sample, ids[:min(len(ids), 2000)]...)
		dropSealed(t, dir)
		var prof *os.File
		if profile != "" && done >= profileFrom {
			if prof, err = os.Create(fmt.Sprintf("%s.%d", profile, done+k)); err != nil {
				t.Fatal(err)
			}
			if err := pprof.StartCPUProfile(prof); err != nil {
				t.Fatal(err)
			}
		}
		start, cpu0 := time.Now(), cpuTime()
		for i := 0; i < k; i += batch {
			b := ids[i:min(i+batch, k)]
			if dups, err = s.AddBatch(ctx, "p", b, clock(done+i), dups[:0]); err != nil {
				t.Fatal(err)
			}
			for j, d := range dups {
				if d {
					t.Fatalf("fresh id %d answered duplicate", done+i+j)
				}
			}
		}
		// A merge the step started runs in the background, beside the
		// adds (it holds no lock they need): el is the adds' own time, what
		// callers see. It is the step's work all the same: wait for it, so
		// that its CPU time is counted here and not in the window's step,
		// and the totals' wall-clock time counts the wait.
		el := time.Since(start)
		s.waitMerges()
		wait, cpu := time.Since(start)-el, cpuTime()-cpu0
		if prof != nil {
			pprof.StopCPUProfile()
			if err := prof.Close(); err != nil {
				t.Fatal(err)
			}
		}
		diskTime += el + wait
		diskCPU += cpu
		start, cpu0 = time.Now(), cpuTime()
		for i := 0; i < k; i += batch {
			res = w.AddBatch("p", ids[i:min(i+batch, k)], clock(done+i), res[:0])
		}
		wel, wcpu := time.Since(start), cpuTime()-cpu0
		winTime += wel
		winCPU += wcpu
		done += k
		rate, wrate := float64(k)/el.Seconds(), float64(k)/wel.Seconds()
		if first == 0 {
			first = rate
		}
		last = rate
		st := s.Stats()
		diskB, memB := perID(st)
		t.Logf("ids=%d adds_per_s=%.0f window_adds_per_s=%.0f adds_per_cpu_s=%.0f window_adds_per_cpu_s=%.0f disk_B_per_id=%.2f sealed_disk_B_per_id=%.2f mem_B_per_id=%.3f generations=%d files=%d open_ids=%d merge_wait=%.1fs load=%s",
			done, rate, wrate, perCPU(k, cpu), perCPU(k, wcpu), diskB, sealedDisk(st), memB, st.Generations, st.Files, st.OpenIDs, wait.Seconds(), loadavg())
		if csv != nil {
			fmt.Fprintf(csv, "%d,%.0f,%.0f,%.3f,%.4f,%d,%.0f,%.0f,%d\n", done, rate, wrate, diskB, memB, st.Generations, perCPU(k, cpu), perCPU(k, wcpu), st.Files)
		}
		ids = nil
		runtime.GC()
		if reopenAt > 0 && done >= reopenAt {
			reopenAt = 0
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			dropAll(t, dir)
			start := time.Now()
			if s, err = Open(dir, horizon, opts...); err != nil {
				t.Fatal(err)
			}
			st := s.Stats()
			t.Logf("Open at %d ids: %v (%d sealed files, journal of %d ids, page cache dropped) load=%s",
				st.IDs, time.Since(start), st.Files, st.OpenIDs, loadavg())
		}
	}
	st := s.Stats()
	diskB, memB := perID(st)
	t.Logf("CPU time: %.0f adds a CPU-second, window %.0f (wall-clock rates share the 2 cores with the load above)", perCPU(n, diskCPU), perCPU(n, winCPU))
	t.Logf("at the end: %.2f B an id on disk in all (journal included), %.2f B an id in the sealed files, %.3f B an id of memory for the sealed generations",
		diskB, sealedDisk(st), memB)

	// Duplicates, sealed files cold: each costs a block read.
	dropSealed(t, dir)
	start := time.Now()
	for i := 0; i < len(sample); i += batch {
		b := sample[i:min(i+batch, len(sample))]
		if dups, err = s.AddBatch(ctx, "p", b, clock(n), dups[:0]); err != nil {
			t.Fatal(err)
		}
		for j, d := range dups {
			if !d {
				t.Fatalf("id %q re-added: answered new", b[j])
			}
		}
	}
	t.Logf("duplicates (cold): %.0f a second over %d", float64(len(sample))/time.Since(start).Seconds(), len(sample))

	// Single Add: one fsync a call alone, shared by concurrent callers.
	single := uuids(r, 64*200)
	start = time.Now()
	for _, id := range single[:1000] {
		if _, err := s.Add(ctx, "p", id, clock(n)); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("single Add, 1 caller: %.0f a second", 1000/time.Since(start).Seconds())
	start = time.Now()
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			for _, id := range single[1000+g*180 : 1000+(g+1)*180] {
				if _, err := s.Add(ctx, "p", id, clock(n)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("single Add, 64 callers (group commit): %.0f a second", 64*180/time.Since(start).Seconds())

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	dropAll(t, dir)
	start = time.Now()
	s, err = Open(dir, horizon, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Open after restart: %v for %d ids (%d sealed files, journal of %d ids)", time.Since(start), s.Stats().IDs, s.Stats().Files, s.Stats().OpenIDs)
	s.Close()
	fmt.Printf("ids=%d disk_B_per_id=%.2f mem_B_per_id=%.3f adds_per_s=%.0f window_adds_per_s=%.0f last_over_first=%.2f\n",
		n, diskB, memB, float64(n)/diskTime.Seconds(), float64(n)/winTime.Seconds(), last/first)
}

// perID is the disk bytes an id (sealed files and journal over all ids)
// and the memory an id of the sealed generations.
func perID(st Stats) (disk, mem float64) {
	disk = float64(st.DiskBytes) / float64(max(st.IDs, 1))
	if sealed := st.IDs - st.OpenIDs; sealed > 0 {
		mem = float64(st.SealedMem) / float64(sealed)
	}
	return disk, mem
}

// perCPU is k ids over cpu, 0 if unknown.
func perCPU(k int, cpu time.Duration) float64 {
	if cpu <= 0 {
		return 0
	}
	return float64(k) / cpu.Seconds()
}

// sealedDisk is the sealed files' bytes an id they hold.
func sealedDisk(st Stats) float64 {
	if sealed := st.IDs - st.OpenIDs; sealed > 0 {
		return float64(st.DiskBytes-st.JournalBytes) / float64(sealed)
	}
	return 0
}

func dropSealed(t *testing.T, dir string) {
	files, _ := filepath.Glob(filepath.Join(dir, "*.edf"))
	for _, f := range files {
		if err := dropCache(f); err != nil {
			t.Logf("fadvise %s: %v", f, err)
		}
	}
}

// dropAll drops the page cache of every file of the set: sealed files
// and journal.
func dropAll(t *testing.T, dir string) {
	files, _ := filepath.Glob(filepath.Join(dir, "gen-*"))
	for _, f := range files {
		if err := dropCache(f); err != nil {
			t.Logf("fadvise %s: %v", f, err)
		}
	}
}

// uuids returns k random canonical lowercase UUIDv4 texts.
func uuids(r *rand.Rand, k int) []string {
	ids := make([]string, k)
	var u [16]byte
	for i := range ids {
		for j := 0; j < 16; j += 8 {
			x := r.Uint64()
			for m := range 8 {
				u[j+m] = byte(x >> (8 * m))
			}
		}
		u[6] = u[6]&0x0f | 0x40
		u[8] = u[8]&0x3f | 0x80
		ids[i] = uuidtext.Format(u)
	}
	return ids
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil || len(b) < 14 {
		return "?"
	}
	var a, b5, c float64
	fmt.Sscan(string(b), &a, &b5, &c)
	return fmt.Sprintf("%.2f/%.2f/%.2f", a, b5, c)
}
