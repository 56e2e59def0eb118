//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package diskwindow

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDir takes an exclusive advisory lock on dir's LOCK file, held while
// the returned file stays open. Another Set on dir, in this process or
// another, is refused with ErrLocked: two writers would each replay the
// other's journal as their own and answer ids the other recorded as new.
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, "LOCK")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("diskwindow: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("diskwindow: %s is open in another Set (this process or another): close it first, or give each Set a directory of its own: %w", dir, ErrLocked)
		}
		return nil, fmt.Errorf("diskwindow: locking %s: %w", path, err)
	}
	return f, nil
}
