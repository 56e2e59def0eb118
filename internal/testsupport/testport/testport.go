// Package testport hands out loopback TCP ports for the servers that tests
// start as child processes (testenv's databases and brokers, natsenv's
// JetStream servers), reserved across every test process on the machine.
//
// A server a test starts is told its port before it binds it, so the port
// must stay free from the moment it is chosen until the server binds it,
// which under load can be seconds. A port the kernel hands out for :0 is
// from its ephemeral range, the range every outgoing connection takes its
// local port from, so a busy machine's clients can take it first; and
// another test process may choose the same port at the same time. So
// [Free] chooses below the ephemeral range, where the kernel assigns no
// local ports, and reserves each port it hands out with a lock on a file
// named after it (flock), held until this process exits: the other test
// processes, which choose the same way, pass over it, and the kernel drops
// the lock when the process ends, however it ends. The lock files stay in
// the temporary directory (empty, at most one a port of the range): one
// removed while another process opens it would let two processes lock
// "the same" port.
package testport

import (
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// held keeps the lock files of the ports handed out open.
var held struct {
	sync.Mutex
	files []*os.File
}

// LockDir is the folder of the ports' lock files.
func LockDir() string { return filepath.Join(os.TempDir(), "idem-testenv-ports") }

// Free returns a loopback TCP port that is free and reserved for this
// process until it exits, or one from the kernel ([Kernel]) when none can
// be reserved.
func Free() (int, error) {
	lo, hi, ok := Range()
	dir := LockDir()
	if !ok || os.MkdirAll(dir, 0o777) != nil {
		return Kernel()
	}
	for range 200 {
		p := lo + rand.IntN(hi-lo)
		f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(p)), os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			return Kernel()
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			f.Close() // another process (or a server of this one) has it
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			f.Close() // in use by something that does not lock: releases the lock
			continue
		}
		l.Close()
		held.Lock()
		held.files = append(held.files, f)
		held.Unlock()
		return p, nil
	}
	return Kernel()
}

// Range is the 10,000 ports below the kernel's ephemeral range, [lo, hi)
// (Linux: ip_local_port_range, 32768 by default; elsewhere 32768 is
// assumed), or false if that range would reach the well-known ports.
func Range() (lo, hi int, ok bool) {
	hi = 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				hi = n
			}
		}
	}
	lo = hi - 10000
	return lo, hi, lo >= 10000
}

// Kernel asks the kernel for a free loopback TCP port, which is free only
// until an outgoing connection or another process takes it.
func Kernel() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
