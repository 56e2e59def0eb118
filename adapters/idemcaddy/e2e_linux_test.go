package idemcaddy_test

import "syscall"

// dieWithParent kills the Caddy process if the test binary dies.
func dieWithParent(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
