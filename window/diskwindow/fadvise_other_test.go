//go:build !linux || !(amd64 || arm64)

package diskwindow

import "time"

// dropCache does nothing here: the curve's sealed reads may be warm.
func dropCache(string) error { return nil }

// cpuTime is unknown here: the curve reports wall-clock rates only.
func cpuTime() time.Duration { return 0 }

func threadCPU() time.Duration { return 0 }
