//go:build !linux

package chaos

import "syscall"

// sysProcAttr returns nil where the kernel cannot kill a worker when its
// harness dies (no Pdeathsig): workers then end when their stdin closes.
func sysProcAttr() *syscall.SysProcAttr { return nil }
