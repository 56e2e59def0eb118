//go:build amd64 || arm64

package compact

import "unsafe"

// prefetch hints that the cache line at p will be read soon
// (prefetch_amd64.s, prefetch_arm64.s). It never faults.
//
//go:noescape
func prefetch(p unsafe.Pointer)
