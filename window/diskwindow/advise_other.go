//go:build !linux

package diskwindow

import "os"

// adviseRandom does nothing where posix_fadvise is not available.
func adviseRandom(*os.File) {}
