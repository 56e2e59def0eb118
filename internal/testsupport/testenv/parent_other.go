//go:build !linux

package testenv

import "syscall"

// dieWithParent does nothing where the kernel has no parent-death signal
// (macOS, the BSDs): there, a test binary killed mid-run leaves the
// servers it started running, to be stopped by hand. (make test, which
// installs them with apt-get, is for Debian-like Linux; elsewhere the tests
// that need a server skip, naming it, unless CI is set.)
func dieWithParent(*syscall.SysProcAttr) {}
