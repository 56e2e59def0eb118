package chaos

import "syscall"

// sysProcAttr puts a worker in its own process group (a terminal's Ctrl-C
// goes to the harness, which stops the workers itself) and has the kernel
// SIGKILL it if the harness dies, so that no worker outlives its harness.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
