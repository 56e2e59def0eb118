//go:build unix

package main

import (
	"os"
	"syscall"
)

// execIdemd replaces this process with idemd running args: same pid, so
// signals (SIGHUP reloads, SIGTERM) and the exit code are idemd's own.
func execIdemd(path string, args []string) error {
	return syscall.Exec(path, append([]string{path}, args...), os.Environ())
}
