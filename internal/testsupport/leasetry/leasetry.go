// Package leasetry runs a test case that depends on a lease being renewed
// in time again, with a longer lease, when the machine rather than the
// code lost the lease: a loaded CI machine can leave a process, or the
// store it renews against, unrun for a whole lease, and the holder is then
// rightly told its lease was lost. Losing it on the last try still fails.
package leasetry

import (
	"testing"
	"time"
)

// Run calls try with lease. While try returns a non-nil error (the lease
// was lost; try has checked nothing else), it calls try again with a lease
// four times as long, at most max, for tries calls in all; it fails t if
// the last call lost its lease too. try returns nil once the case passed
// (or failed t on its own).
func Run(t testing.TB, lease, max time.Duration, tries int, try func(lease time.Duration) (lost error)) {
	t.Helper()
	for n := 1; ; n++ {
		lost := try(lease)
		if lost == nil {
			return
		}
		if n >= tries || lease >= max {
			t.Fatalf("the lease of %v was lost on try %d of %d: %v", lease, n, tries, lost)
			return
		}
		t.Logf("the lease of %v was lost on this machine (%v); again with a lease four times as long", lease, lost)
		lease = min(4*lease, max)
	}
}
