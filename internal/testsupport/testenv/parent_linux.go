package testenv

import "syscall"

// dieWithParent has the kernel kill the child when this process dies, so a
// test binary killed mid-run leaves no server behind.
func dieWithParent(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
