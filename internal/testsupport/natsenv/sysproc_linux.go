package natsenv

import "syscall"

// dieWithParent makes a server die with the test binary that started it.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
