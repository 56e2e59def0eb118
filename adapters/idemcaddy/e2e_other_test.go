//go:build !linux

package idemcaddy_test

import "syscall"

func dieWithParent(*syscall.SysProcAttr) {}
