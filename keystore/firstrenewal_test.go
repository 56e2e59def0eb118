package keystore

import (
	"context"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"
)

// The shard's heap hands out its entries in the order they are due,
// whatever was added and taken out in between.
func TestFirstShardHeapOrder(t *testing.T) {
	s := &firstShard{}
	base := time.Now()
	var live []*Renewal
	for round := range 2000 {
		if len(live) == 0 || rand.IntN(3) != 0 {
			r := &Renewal{shard: s, due: base.Add(time.Duration(rand.IntN(1000)) * time.Millisecond)}
			r.idx = len(s.heap)
			s.heap = append(s.heap, r)
			s.up(r.idx)
			live = append(live, r)
		} else {
			i := rand.IntN(len(live))
			r := live[i]
			s.remove(r.idx)
			if r.idx != -1 {
				t.Fatalf("round %d: a removed entry keeps index %d", round, r.idx)
			}
			live = append(live[:i], live[i+1:]...)
		}
		for i, r := range s.heap {
			if r.idx != i {
				t.Fatalf("round %d: entry at %d says %d", round, i, r.idx)
			}
			if i > 0 && r.due.Before(s.heap[(i-1)/2].due) {
				t.Fatalf("round %d: entry at %d due before its parent", round, i)
			}
		}
	}
	sort.Slice(live, func(i, j int) bool { return live[i].due.Before(live[j].due) })
	for i := range live {
		if got := s.heap[0].due; !got.Equal(live[i].due) {
			t.Fatalf("pop %d: due %v, want %v", i, got.Sub(base), live[i].due.Sub(base))
		}
		s.remove(0)
	}
}

// countingExtender counts Extend calls by key and notes when the first
// came.
type countingExtender struct {
	mu    sync.Mutex
	first map[string]time.Time
	calls map[string]int
}

func (e *countingExtender) Extend(_ context.Context, c Claim, lease time.Duration) (Claim, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.calls[c.Key] == 0 {
		e.first[c.Key] = time.Now()
	}
	e.calls[c.Key]++
	c.Expires = time.Now().Add(lease)
	return c, nil
}

// Renewals with leases of every length share the schedule: each one not
// stopped gets its first renewal, never before it is due, and one stopped
// after it returns never renews.
func TestFirstRenewalsShared(t *testing.T) {
	e := &countingExtender{first: map[string]time.Time{}, calls: map[string]int{}}
	type started struct {
		r        *Renewal
		key      string
		earliest time.Time // the first renewal may not come sooner
		stop     bool
		atStop   int // Extend calls when Stop returned
	}
	var all []started
	for i := range 300 {
		lease := 150*time.Millisecond + time.Duration(rand.IntN(600))*time.Millisecond
		key := "k" + string(rune('a'+i%26)) + time.Duration(i).String()
		r := &Renewal{}
		now := time.Now()
		r.Start(context.Background(), e, Claim{Key: key, Token: 1, Expires: now.Add(lease)}, lease, func(error) {})
		all = append(all, started{r: r, key: key, earliest: now.Add(lease / 6), stop: i%2 == 0})
	}
	for i := range all {
		if all[i].stop {
			all[i].r.Stop()
			e.mu.Lock()
			all[i].atStop = e.calls[all[i].key]
			e.mu.Unlock()
		}
	}
	deadline := time.Now().Add(2 * time.Minute) // a hang guard, not a speed bound
	for {
		e.mu.Lock()
		missing := 0
		for _, s := range all {
			if !s.stop && e.calls[s.key] == 0 {
				missing++
			}
		}
		e.mu.Unlock()
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d renewals never came", missing)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, s := range all {
		if !s.stop {
			s.r.Stop()
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range all {
		switch {
		case s.stop && e.calls[s.key] != s.atStop:
			t.Errorf("%s renewed after Stop returned", s.key)
		case !s.stop && e.first[s.key].Before(s.earliest):
			t.Errorf("%s renewed %v before it was due", s.key, s.earliest.Sub(e.first[s.key]))
		}
	}
}
