// Package ewma is the moving average of recent execution times that the
// HTTP middleware and the gRPC interceptor keep, to tell a duplicate of a
// request in progress how long to wait before it retries.
package ewma

import (
	"sync/atomic"
	"time"
)

// Duration is an exponentially weighted moving average of durations, each
// new one weighing 1/8. It is safe for concurrent use; its zero value has
// observed nothing.
type Duration struct{ ns atomic.Int64 }

// Observe adds d to the average; the first observation is the average. A
// non-positive d counts as 1ns, so that an observed average is never 0.
func (e *Duration) Observe(d time.Duration) {
	x := max(int64(d), 1)
	for {
		old := e.ns.Load()
		nw := x
		if old != 0 {
			nw = old + (x-old)/8
		}
		if e.ns.CompareAndSwap(old, nw) {
			return
		}
	}
}

// Value is the average, 0 before the first observation.
func (e *Duration) Value() time.Duration { return time.Duration(e.ns.Load()) }
