package idemkafka_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// txnCluster is the kfake cluster of a crash test, run by the parent and
// reached by the children at its address. Sessions may be short, so that a
// killed member leaves the group in about two seconds.
func txnCluster(t *testing.T, topics ...string) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, topics...),
		kfake.GroupMinSessionTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// payments produces n payments over keys acct-0..acct-9; the value of the
// i-th payment of a key is "acct-k:i", so order per key can be checked.
func payments(t *testing.T, c *kfake.Cluster, topic string, n int) {
	t.Helper()
	cl := client(t, c)
	rs := make([]*kgo.Record, n)
	for i := range rs {
		key := fmt.Sprintf("acct-%d", i%10)
		rs[i] = &kgo.Record{Topic: topic, Key: []byte(key), Value: fmt.Appendf(nil, "%s:%d", key, i/10)}
	}
	if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// child is one consumer instance: this test binary re-executed.
type child struct {
	t     *testing.T
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	mu    sync.Mutex
	err   bytes.Buffer
	done  chan struct{}
}

type childSpec struct {
	mode, id, life, group, in, out, kill string
}

func startChild(t *testing.T, c *kfake.Cluster, s childSpec) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	env := func(k, v string) string { return txnChildEnv + "_" + k + "=" + v }
	// GORACE: a race-enabled binary otherwise sleeps 1 s before exiting.
	cmd.Env = append(os.Environ(), txnChildEnv+"=1", "GORACE=atexit_sleep_ms=0",
		env("ADDR", c.ListenAddrs()[0]), env("MODE", s.mode), env("ID", s.id), env("LIFE", s.life),
		env("GROUP", s.group), env("IN", s.in), env("OUT", s.out), env("KILL", s.kill))
	ch := &child{t: t, name: s.life, cmd: cmd, lines: make(chan string, 16), done: make(chan struct{})}
	cmd.Stderr = &lockedWriter{mu: &ch.mu, w: &ch.err}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if ch.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			ch.lines <- sc.Text()
		}
		close(ch.lines)
		_ = cmd.Wait()
		close(ch.done)
	}()
	t.Cleanup(ch.kill)
	return ch
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// await waits for a line starting with prefix and returns it.
func (ch *child) await(prefix string) string {
	ch.t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case l, ok := <-ch.lines:
			if !ok {
				ch.mu.Lock()
				defer ch.mu.Unlock()
				ch.t.Fatalf("%s exited before %q: %s", ch.name, prefix, ch.err.String())
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-timeout:
			ch.t.Fatalf("%s: no %q within 60 s", ch.name, prefix)
		}
	}
}

func (ch *child) signal(sig syscall.Signal) {
	if ch.cmd.Process != nil {
		_ = ch.cmd.Process.Signal(sig)
	}
}

// kill sends SIGKILL and waits for the process to be reaped.
func (ch *child) kill() {
	ch.signal(syscall.SIGKILL)
	go func() {
		for range ch.lines { //nolint:revive // drain so the reader can finish
		}
	}()
	<-ch.done
}

// waitCommitted waits until group's committed offsets reach topic's end.
func waitCommitted(t *testing.T, c *kfake.Cluster, group, topic string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		got, end := offsets(t, c, group, topic)
		done := true
		for p, e := range end {
			if got[p] < e {
				done = false
			}
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %s: committed %v, log end %v", group, got, end)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// readAll reads topic from the start with the given isolation level until
// a second passes without a new record.
func readAll(t *testing.T, c *kfake.Cluster, topic string, readCommitted bool) []*kgo.Record {
	t.Helper()
	opts := []kgo.Opt{kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100 * time.Millisecond)}
	if readCommitted {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	cl := client(t, c, opts...)
	var out []*kgo.Record
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		n := 0
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r); n++ })
		if n == 0 {
			return out
		}
	}
}

// ledgerCheck counts what a reader of the ledger saw: duplicates (records
// beyond the first of each value), values missing of the n payments, and
// keys whose entries are not 0, 1, 2, … in log order.
type ledgerCheck struct {
	records, duplicates, missing, outOfOrder int
	lives                                    map[string]int
}

func checkLedger(recs []*kgo.Record, n int) ledgerCheck {
	lc := ledgerCheck{records: len(recs), lives: map[string]int{}}
	seen := map[string]bool{}
	next := map[string]int{}
	bad := map[string]bool{}
	for _, r := range recs {
		v := string(r.Value)
		if seen[v] {
			lc.duplicates++
		}
		seen[v] = true
		key, i, _ := strings.Cut(v, ":")
		seq, _ := strconv.Atoi(i)
		if seq != next[key] {
			bad[key] = true
		}
		next[key] = seq + 1
		for _, h := range r.Headers {
			if h.Key == "life" {
				lc.lives[string(h.Value)]++
			}
		}
	}
	lc.missing = n - len(seen)
	lc.outOfOrder = len(bad)
	return lc
}
