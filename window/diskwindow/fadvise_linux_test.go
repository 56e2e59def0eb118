//go:build linux && (amd64 || arm64)

package diskwindow

import (
	"os"
	"syscall"
)

// dropCache asks the kernel to drop the file's pages from the page cache
// (posix_fadvise POSIX_FADV_DONTNEED), so that the next reads go to disk.
func dropCache(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	const dontNeed = 4
	if _, _, e := syscall.Syscall6(syscall.SYS_FADVISE64, f.Fd(), 0, 0, dontNeed, 0, 0); e != 0 {
		return e
	}
	return nil
}
