package keystore

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRenewalScheduleHeap adds renewals in random due order to a schedule
// (its timer far off), removes random ones, and checks after each step
// that the heap is ordered, every slot names its place, and what is left
// comes out in due order.
func TestRenewalScheduleHeap(t *testing.T) {
	var s renewalSchedule
	defer func() {
		if s.timer != nil {
			s.timer.Stop()
		}
	}()
	base := time.Now().Add(time.Hour)
	check := func(step string) {
		t.Helper()
		for i, r := range s.heap {
			if r.slot != i+1 {
				t.Fatalf("%s: renewal at %d has slot %d", step, i, r.slot)
			}
			if p := (i - 1) / 2; i > 0 && r.due.Before(s.heap[p].due) {
				t.Fatalf("%s: heap out of order at %d", step, i)
			}
		}
	}
	var all []*Renewal
	for range 500 {
		r := &Renewal{}
		s.add(r, base.Add(time.Duration(rand.IntN(1000))*time.Millisecond), time.Second)
		all = append(all, r)
		check("add")
	}
	rand.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	for _, r := range all[:250] {
		s.remove(r)
		s.remove(r) // again: nothing
		if r.slot != 0 {
			t.Fatalf("removed renewal keeps slot %d", r.slot)
		}
		check("remove")
	}
	if len(s.heap) != 250 {
		t.Fatalf("%d renewals left, want 250", len(s.heap))
	}
	var last time.Time
	for len(s.heap) > 0 {
		r := s.heap[0]
		s.delete(0)
		check("pop")
		if r.due.Before(last) {
			t.Fatalf("popped %v after %v", r.due, last)
		}
		last = r.due
	}
}

// countingExtender counts Extend calls by key and holds every lease.
type countingExtender struct {
	mu sync.Mutex
	n  map[string]int
}

func (e *countingExtender) Extend(_ context.Context, c Claim, lease time.Duration) (Claim, error) {
	e.mu.Lock()
	e.n[c.Key]++
	e.mu.Unlock()
	c.Expires = time.Now().Add(lease)
	return c, nil
}

func (e *countingExtender) count(key string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[key]
}

// TestRenewalsConcurrent starts and stops renewals from many goroutines at
// once through the shared schedule: those stopped before they are due are
// never renewed, and each of those kept running is renewed, again and
// again, without its lease being reported lost.
func TestRenewalsConcurrent(t *testing.T) {
	ext := &countingExtender{n: map[string]int{}}
	const short, long = 40 * time.Millisecond, time.Hour
	var lost atomic.Int32
	onLost := func(error) { lost.Add(1) }
	var wg sync.WaitGroup
	kept := make([]*Renewal, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 { // started and stopped long before they are due
				r := &Renewal{}
				r.Start(context.Background(), ext, Claim{Key: "stopped", Token: uint64(i + 1)}, long, onLost)
				if _, err := r.Stop(); err != nil {
					t.Errorf("stop: %v", err)
				}
				if inSchedule(r) {
					t.Errorf("a stopped renewal is still in the schedule")
				}
			}
			r := &Renewal{}
			r.Start(context.Background(), ext, Claim{Key: "kept-" + string(rune('a'+g)), Token: 1}, short, onLost)
			kept[g] = r
		})
	}
	wg.Wait()
	for g, r := range kept {
		key := "kept-" + string(rune('a'+g))
		// A hang guard, not a speed bound (testenv.WaitFor's rule; testenv
		// imports this package).
		for deadline := time.Now().Add(time.Minute); ext.count(key) < 3; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s renewed %d times in a minute, want 3", key, ext.count(key))
			}
		}
		if _, err := r.Stop(); err != nil {
			t.Fatalf("%s: stop: %v", key, err)
		}
	}
	if n := ext.count("stopped"); n != 0 {
		t.Fatalf("%d renewals of renewals stopped before they were due", n)
	}
	if n := lost.Load(); n != 0 {
		t.Fatalf("%d leases reported lost while the store renewed them", n)
	}
	for g, r := range kept {
		if inSchedule(r) {
			t.Fatalf("kept-%c is in the schedule after its renewals and Stop", 'a'+g)
		}
	}
}

func inSchedule(r *Renewal) bool {
	firstRenewals.mu.Lock()
	defer firstRenewals.mu.Unlock()
	return r.slot != 0
}
