package testenv

import (
	"bytes"
	"net"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The helpers below run a program under test as a child process (a Caddy
// binary, the test binary re-executed as idem serve): a free address to
// give it, its output readable while it runs, a start tied to the test's
// life, and a poll for the moment it answers.

// FreeAddr returns a 127.0.0.1:port address that was free a moment ago,
// for a child process to listen on.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// SyncBuffer is a child's output: written by the process, read by the
// test while it runs. It is safe for concurrent use.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// WaitFor polls cond every 20 ms until it holds, and fails t if within
// passes first (give a bound generous enough for a machine at load 10).
func WaitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Proc is a child process started by [StartProc].
type Proc struct {
	Cmd    *exec.Cmd
	Out    *SyncBuffer   // its stdout and stderr
	Exited chan struct{} // closed when it has exited; then Err is its exit
	Err    error
}

// StartProc starts cmd with its stdout and stderr into a new SyncBuffer,
// killed by the kernel if the test binary dies (Linux). When the test
// ends, the process gets SIGTERM and grace to exit (SIGKILL at once for a
// grace of 0, and after grace otherwise), and its output is logged, named
// name, if the test failed.
func StartProc(t testing.TB, name string, cmd *exec.Cmd, grace time.Duration) *Proc {
	t.Helper()
	p := &Proc{Cmd: cmd, Out: &SyncBuffer{}, Exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.Out, p.Out
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	dieWithParent(cmd.SysProcAttr)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.Err = cmd.Wait(); close(p.Exited) }()
	t.Cleanup(func() {
		if grace == 0 {
			_ = cmd.Process.Kill()
		} else {
			_ = cmd.Process.Signal(syscall.SIGTERM)
		}
		select {
		case <-p.Exited:
		case <-time.After(grace):
			_ = cmd.Process.Kill()
			<-p.Exited
		}
		if t.Failed() {
			t.Logf("%s's output:\n%s", name, p.Out)
		}
	})
	return p
}
