//go:build linux

package diskwindow

import (
	"os"

	"golang.org/x/sys/unix"
)

// adviseRandom tells the kernel that f's blocks are read at random
// (posix_fadvise POSIX_FADV_RANDOM): a lookup reads one 4 KiB block, and
// the readahead a cold read would otherwise start (tens of pages read and
// cached for one that is used) costs CPU and evicts the blocks other
// lookups need. Advice only: an error changes nothing.
func adviseRandom(f *os.File) {
	unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_RANDOM)
}
