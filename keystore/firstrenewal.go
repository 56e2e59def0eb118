package keystore

import (
	"math/rand/v2"
	"sync"
	"time"
)

// A Renewal's first renewal is scheduled here, not on a timer of its own.
// Most effects return long before their first renewal is due (a third of
// the lease, with jitter), and a timer armed and stopped for each of them
// costs an allocation and two operations on the runtime's timer heap, a
// large share of a fast keyed HTTP request's own cost. Instead a Renewal
// joins a heap of pending first renewals, ordered by when they are due,
// in one of a few shards (so that callers on many cores do not queue on
// one lock); each shard has one timer, armed for its earliest entry. An
// effect that returns first leaves the heap again: a lock, a few swaps, no
// allocation once the heap has grown. When the timer fires, the entries
// due are taken out and each renews on a goroutine of its own, as
// time.AfterFunc would run it; renewals after the first use a timer of
// the Renewal's own, since an effect that lives that long is rare.

// firstShards is the number of shards of the pending first renewals.
const firstShards = 8

// firsts are the pending first renewals.
var firsts [firstShards]firstShard

// firstShard is a heap of Renewals ordered by due, with its timer.
type firstShard struct {
	mu    sync.Mutex
	heap  []*Renewal
	timer *time.Timer // fires fire; created at the first add
	armed time.Time   // when timer fires; zero if it is not armed
	_     [64]byte    // keeps shards' locks off one another's cache lines
}

// scheduleFirst makes r renew at due (r.renew on a goroutine of its own),
// unless unscheduleFirst is called first.
func scheduleFirst(r *Renewal, due time.Time) {
	s := &firsts[rand.IntN(firstShards)]
	s.mu.Lock()
	r.shard, r.due, r.idx = s, due, len(s.heap)
	s.heap = append(s.heap, r)
	s.up(r.idx)
	if s.armed.IsZero() || due.Before(s.armed) {
		s.arm(due)
	}
	s.mu.Unlock()
}

// unscheduleFirst takes r out of its shard's heap if it is still there.
// The shard's timer stays armed: firing with nothing due costs one wake-up.
func unscheduleFirst(r *Renewal) {
	s := r.shard
	if s == nil {
		return
	}
	s.mu.Lock()
	if r.idx >= 0 {
		s.remove(r.idx)
	}
	s.mu.Unlock()
}

// arm sets the shard's timer for due. Called with s.mu held.
func (s *firstShard) arm(due time.Time) {
	s.armed = due
	if s.timer == nil {
		s.timer = time.AfterFunc(time.Until(due), s.fire)
		return
	}
	s.timer.Reset(time.Until(due))
}

// fire takes the entries that are due out of the heap, arms the timer for
// the next one, and starts their renewals.
func (s *firstShard) fire() {
	now := time.Now()
	var due []*Renewal
	s.mu.Lock()
	s.armed = time.Time{}
	for len(s.heap) > 0 && !s.heap[0].due.After(now) {
		due = append(due, s.heap[0])
		s.remove(0)
	}
	if len(s.heap) > 0 {
		s.arm(s.heap[0].due)
	}
	s.mu.Unlock()
	for _, r := range due {
		go r.renew()
	}
}

// remove takes the entry at i out of the heap. Called with s.mu held.
func (s *firstShard) remove(i int) {
	h := s.heap
	last := len(h) - 1
	h[i].idx = -1
	if i != last {
		h[i], h[last] = h[last], h[i]
		h[i].idx = i
	}
	h[last] = nil
	s.heap = h[:last]
	if i != last {
		s.down(i)
		s.up(i)
	}
}

// up moves the entry at i towards the root while it is due before its
// parent.
func (s *firstShard) up(i int) {
	h := s.heap
	for i > 0 {
		p := (i - 1) / 2
		if !h[i].due.Before(h[p].due) {
			return
		}
		h[i], h[p] = h[p], h[i]
		h[i].idx, h[p].idx = i, p
		i = p
	}
}

// down moves the entry at i towards the leaves while a child is due before
// it.
func (s *firstShard) down(i int) {
	h := s.heap
	for {
		c := 2*i + 1
		if c >= len(h) {
			return
		}
		if c+1 < len(h) && h[c+1].due.Before(h[c].due) {
			c++
		}
		if !h[c].due.Before(h[i].due) {
			return
		}
		h[i], h[c] = h[c], h[i]
		h[i].idx, h[c].idx = i, c
		i = c
	}
}
