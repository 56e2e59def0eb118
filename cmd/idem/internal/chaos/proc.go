package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// proc is one worker process, owned by the harness's loop. Only the loop
// touches its fields; the reader goroutine uses cmd and the pipes, which
// are set before it starts.
type proc struct {
	slot, gen int
	cmd       *exec.Cmd
	process   *os.Process
	stdin     io.WriteCloser
	bw        *bufio.Writer
	held      map[uint64]struct{} // deliveries the worker holds
	stderr    *tail
	started   time.Time
	ready     bool
	exited    bool
	stopping  bool // asked to stop: its exit is not a crash to replace
	dirty     bool // bw holds unflushed frames
	fatal     string
	readErr   error
	state     *os.ProcessState
}

// event is what a reader goroutine reports to the loop: a frame, or the
// process's exit (always the last event of a proc).
type event struct {
	p    *proc
	f    frame
	exit bool
	err  error
}

// startProc starts worker slot's process number gen and its reader
// goroutine, which sends every frame and finally the exit to events. The
// goroutine ends after the process has exited and been reaped; the loop
// must keep receiving from events until it has seen every proc's exit.
func (h *harness) startProc(ctx context.Context, slot, gen int, hello []byte, events chan<- event) (*proc, error) {
	cmd := h.cfg.command(ctx)
	cmd.SysProcAttr = sysProcAttr()
	p := &proc{slot: slot, gen: gen, held: map[uint64]struct{}{}, stderr: &tail{}, started: time.Now()}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("chaos: worker: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("chaos: worker: %w", err)
	}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("chaos: start worker %s: %w", cmd.Path, err)
	}
	p.cmd, p.process, p.stdin = cmd, cmd.Process, stdin
	p.bw = bufio.NewWriterSize(stdin, 16<<10)
	go func() {
		br := bufio.NewReaderSize(stdout, 16<<10)
		var rerr error
		for {
			f, err := readFrame(br)
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrClosed) {
					rerr = err
					_ = cmd.Process.Kill()
				}
				break
			}
			events <- event{p: p, f: f}
		}
		_, _ = io.Copy(io.Discard, stdout)
		_ = cmd.Wait()
		events <- event{p: p, exit: true, err: rerr}
	}()
	// The hello fits in the pipe's buffer; if the worker died already,
	// its exit event follows.
	_ = writeFrame(p.bw, frame{kind: kindHello, payload: hello})
	_ = p.bw.Flush()
	return p, nil
}

// helloFor encodes the worker configuration of one strategy run.
func (h *harness) helloFor(s *impl, ns namespace, slot int) []byte {
	b, _ := json.Marshal(workerConfig{
		Strategy: s.Name, Backend: h.cfg.backend, DSN: ns.dsn, Schema: ns.schema,
		Keystore: h.cfg.keystore, RunID: h.runID, Lease: int64(h.cfg.lease), Worker: slot,
	})
	return b
}

// send writes a delivery to p (buffered; flushed by flush).
func (p *proc) send(d delivery) {
	p.held[d.tag] = struct{}{}
	p.dirty = true
	_ = writeFrame(p.bw, frame{kind: kindDeliver, d: d}) // a dead worker's exit event follows
}

func (p *proc) flush() {
	if p.dirty {
		p.dirty = false
		_ = p.bw.Flush()
	}
}

func (p *proc) kill() {
	if !p.exited {
		_ = p.process.Kill()
	}
}

// crashed reports whether the process was killed by a signal (SIGKILL from
// itself or from the harness).
func (p *proc) crashed() bool {
	return p.state != nil && p.state.ExitCode() == -1
}

// describe summarises why a worker ended, for errors and logs.
func (p *proc) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "worker %d.%d", p.slot, p.gen)
	if p.state != nil {
		fmt.Fprintf(&b, " (%s)", p.state)
	}
	if p.fatal != "" {
		fmt.Fprintf(&b, ": %s", p.fatal)
	}
	if p.readErr != nil {
		fmt.Fprintf(&b, ": %v", p.readErr)
	}
	if s := strings.TrimSpace(p.stderr.String()); s != "" {
		fmt.Fprintf(&b, "; stderr: %s", s)
	}
	return b.String()
}

// tail keeps the last bytes written to it (a worker's stderr).
type tail struct {
	mu  sync.Mutex
	buf []byte
}

const tailSize = 4 << 10

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > tailSize {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-tailSize:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
