//go:build !linux

package natsenv

import "syscall"

// dieWithParent: only Linux can tie a child's life to its parent's; on
// other systems the test's cleanup kills the servers.
func dieWithParent() *syscall.SysProcAttr { return nil }
