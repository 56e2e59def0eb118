package keystore

import (
	"sync"
	"time"
)

// firstRenewals holds every [Renewal] whose first renewal is not yet due,
// in one process-wide schedule behind one timer, so that starting and
// stopping a renewal (once a request for idemhttp and idemgrpc) costs a
// lock and a heap step instead of a runtime timer armed and stopped. Most
// effects end long before their first renewal is due and leave the
// schedule unseen; a renewal that comes due is run on a goroutine of its
// own, as time.AfterFunc would, and arms its own timer for the next ones.
var firstRenewals renewalSchedule

// renewalSchedule is a min-heap of renewals by due time and a timer armed
// at or before the earliest. A renewal added may run up to its slack after
// it is due (see add), so that adding one rarely moves the timer.
type renewalSchedule struct {
	mu    sync.Mutex
	heap  []*Renewal
	timer *time.Timer
	armed time.Time // when timer fires; zero while it is not armed
}

// add schedules r's first renewal at due, to run no later than slack after
// it: the timer is moved only if it would fire later than that.
func (s *renewalSchedule) add(r *Renewal, due time.Time, slack time.Duration) {
	s.mu.Lock()
	r.due = due
	r.slot = len(s.heap) + 1
	s.heap = append(s.heap, r)
	s.up(len(s.heap) - 1)
	if s.armed.IsZero() || s.armed.After(due.Add(slack)) {
		s.arm(due)
	}
	s.mu.Unlock()
}

// remove takes r out of the schedule if it is still there.
func (s *renewalSchedule) remove(r *Renewal) {
	s.mu.Lock()
	if r.slot > 0 {
		s.delete(r.slot - 1)
	}
	s.mu.Unlock()
}

// fire runs, on the timer's goroutine, every renewal that is due, each on
// a goroutine of its own, and arms the timer for the next.
func (s *renewalSchedule) fire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for len(s.heap) > 0 && !s.heap[0].due.After(now) {
		r := s.heap[0]
		s.delete(0)
		go r.renew()
	}
	s.armed = time.Time{}
	if len(s.heap) > 0 {
		s.arm(s.heap[0].due)
	}
}

// arm sets the timer to fire at t. Called with s.mu held.
func (s *renewalSchedule) arm(t time.Time) {
	s.armed = t
	if s.timer == nil {
		s.timer = time.AfterFunc(time.Until(t), s.fire)
		return
	}
	s.timer.Reset(time.Until(t))
}

// delete removes the renewal at heap index i. Called with s.mu held.
func (s *renewalSchedule) delete(i int) {
	last := len(s.heap) - 1
	s.heap[i].slot = 0
	if i != last {
		s.heap[i] = s.heap[last]
		s.heap[i].slot = i + 1
	}
	s.heap[last] = nil
	s.heap = s.heap[:last]
	if i != last {
		s.down(i)
		s.up(i)
	}
}

func (s *renewalSchedule) less(i, j int) bool { return s.heap[i].due.Before(s.heap[j].due) }

func (s *renewalSchedule) swap(i, j int) {
	s.heap[i], s.heap[j] = s.heap[j], s.heap[i]
	s.heap[i].slot, s.heap[j].slot = i+1, j+1
}

func (s *renewalSchedule) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !s.less(i, p) {
			return
		}
		s.swap(i, p)
		i = p
	}
}

func (s *renewalSchedule) down(i int) {
	n := len(s.heap)
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if c+1 < n && s.less(c+1, c) {
			c++
		}
		if !s.less(c, i) {
			return
		}
		s.swap(i, c)
		i = c
	}
}
