//go:build !linux

package diskwindow

import "os"

// adviseRandom does nothing where posix_fadvise is not available.
func adviseRandom(*os.File) {}

// willNeed does nothing where posix_fadvise is not available: the reads
// are made from several goroutines at once instead.
func willNeed(*os.File, int64, int64) bool { return false }
