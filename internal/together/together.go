// Package together runs n calls of a function at once, each on a goroutine
// of its own, all released together: the race of duplicate deliveries that
// the demo stages and the key stores' conformance suite checks.
package together

import "sync"

// Run calls f(i) for every i in [0, n), each on a goroutine of its own,
// released together once all are started, and returns when every call has
// returned.
func Run(n int, f func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			f(i)
		})
	}
	close(start)
	wg.Wait()
}
