//go:build !amd64 && !arm64

package compact

import "unsafe"

// prefetch does nothing on this architecture.
func prefetch(unsafe.Pointer) {}
