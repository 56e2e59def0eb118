// Package ewma holds the moving averages the HTTP middleware and the gRPC
// interceptor keep of recent requests: how long executions take (to tell a
// duplicate of a request in progress how long to wait before it retries)
// and how large responses are (to size a response's record once).
package ewma

import (
	"sync/atomic"
	"time"
)

// average is an exponentially weighted moving average of positive
// integers, each new one weighing 1/8; 0 until the first observation.
type average struct{ v atomic.Int64 }

// observe adds x to the average; the first observation is the average. A
// non-positive x counts as 1, so that an observed average is never 0.
func (a *average) observe(x int64) {
	x = max(x, 1)
	for {
		old := a.v.Load()
		nw := x
		if old != 0 {
			nw = old + (x-old)/8
		}
		if nw == old || a.v.CompareAndSwap(old, nw) {
			return // unchanged: no write, so that a steady average stays a shared read on the request path
		}
	}
}

// Duration is an exponentially weighted moving average of durations, each
// new one weighing 1/8. It is safe for concurrent use; its zero value has
// observed nothing.
type Duration struct{ a average }

// Observe adds d to the average; the first observation is the average. A
// non-positive d counts as 1ns, so that an observed average is never 0.
func (e *Duration) Observe(d time.Duration) { e.a.observe(int64(d)) }

// Value is the average, 0 before the first observation.
func (e *Duration) Value() time.Duration { return time.Duration(e.a.v.Load()) }

// Size is an exponentially weighted moving average of sizes in bytes, each
// new one weighing 1/8. It is safe for concurrent use; its zero value has
// observed nothing.
type Size struct{ a average }

// Observe adds n to the average; the first observation is the average. A
// size below 1 counts as 1, so that an observed average is never 0.
func (s *Size) Observe(n int) { s.a.observe(int64(n)) }

// Value is the average, 0 before the first observation.
func (s *Size) Value() int { return int(s.a.v.Load()) }
