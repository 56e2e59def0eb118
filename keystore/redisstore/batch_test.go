package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/internal/testsupport/testenv"
)

// pipeSizes is a go-redis hook that records the size of every pipeline of
// ECHO commands the client sends (not the connection's set-up).
type pipeSizes struct {
	mu    sync.Mutex
	sizes []int
}

func (h *pipeSizes) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *pipeSizes) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *pipeSizes) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if cmds[0].Name() == "echo" {
			h.mu.Lock()
			h.sizes = append(h.sizes, len(cmds))
			h.mu.Unlock()
		}
		return next(ctx, cmds)
	}
}

func (h *pipeSizes) get() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]int(nil), h.sizes...)
}

func newBatcher(t *testing.T, slots int) (*batcher, *pipeSizes) {
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), PoolSize: 64})
	t.Cleanup(func() { rdb.Close() })
	h := &pipeSizes{}
	rdb.AddHook(h)
	return &batcher{rdb: rdb, slots: slots}, h
}

// waitFor polls cond, under the batcher's lock, until it holds.
func (b *batcher) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		b.mu.Lock()
		ok := cond()
		b.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// hold occupies one of the batcher's slots with a script that keeps Redis
// busy for d, and returns once the script is in flight; the returned
// channel yields its error when it ends.
func (b *batcher) hold(t *testing.T, d time.Duration) <-chan error {
	t.Helper()
	busy := b.busy
	done := make(chan error, 1)
	go func() {
		cmd := redis.NewCmd(context.Background(), "eval", `
local t = redis.call('TIME')
local stop = tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(ARGV[1])
repeat t = redis.call('TIME') until tonumber(t[1]) * 1000000 + tonumber(t[2]) >= stop
return 1`, 0, d.Microseconds())
		done <- b.process(context.Background(), cmd)
	}()
	b.waitFor(t, "the slow script to take its slot", func() bool { return b.busy > busy })
	return done
}

// Calls that find every slot busy go out together as one pipeline when the
// slot frees, and each caller gets its own reply.
func TestBatcherSharesOnePipeline(t *testing.T) {
	b, h := newBatcher(t, 1)
	done := b.hold(t, 200*time.Millisecond)
	const n = 10
	replies := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			cmd := redis.NewStringCmd(context.Background(), "echo", "call-"+strconv.Itoa(i))
			errs[i] = b.process(context.Background(), cmd)
			replies[i] = cmd.Val()
		})
	}
	b.waitFor(t, "all calls to queue", func() bool { return len(b.queue) == n })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || replies[i] != "call-"+strconv.Itoa(i) {
			t.Errorf("call %d: %q, %v", i, replies[i], errs[i])
		}
	}
	if got := h.get(); len(got) != 1 || got[0] != n {
		t.Errorf("pipelines sent: %v, want one of %d", got, n)
	}
	b.waitFor(t, "the slot to be freed", func() bool { return b.busy == 0 && len(b.queue) == 0 })
}

// Under many concurrent callers every reply reaches the caller that sent
// the command, whatever the pipelines were.
func TestBatcherRepliesReachTheirCallers(t *testing.T) {
	for _, slots := range []int{1, 3} {
		t.Run(fmt.Sprint("slots=", slots), func(t *testing.T) {
			b, h := newBatcher(t, slots)
			var wg sync.WaitGroup
			for g := range 64 {
				wg.Go(func() {
					for i := range 50 {
						want := fmt.Sprintf("g%d-i%d", g, i)
						cmd := redis.NewStringCmd(context.Background(), "echo", want)
						if err := b.process(context.Background(), cmd); err != nil || cmd.Val() != want {
							t.Errorf("echo %s: %q, %v", want, cmd.Val(), err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.waitFor(t, "every slot to be freed", func() bool { return b.busy == 0 && len(b.queue) == 0 })
			t.Logf("%d pipelines, sizes %v…", len(h.get()), h.get()[:min(len(h.get()), 10)])
		})
	}
}

// A caller whose context ends while it waits for a slot returns at once,
// and its command is never sent; the calls queued with it still run.
func TestBatcherCancelledWhileQueued(t *testing.T) {
	b, _ := newBatcher(t, 1)
	key := testenv.Name("cancelled_")
	done := b.hold(t, 300*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error, 1)
	go func() { gone <- b.process(ctx, redis.NewStatusCmd(ctx, "set", key, "1", "px", 60000)) }()
	other := make(chan *redis.StringCmd, 1)
	go func() {
		cmd := redis.NewStringCmd(context.Background(), "echo", "still here")
		_ = b.process(context.Background(), cmd)
		other <- cmd
	}()
	b.waitFor(t, "both calls to queue", func() bool { return len(b.queue) == 2 })
	cancel()
	select {
	case err := <-gone:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled call: %v, want context.Canceled", err)
		}
	case <-done:
		t.Fatal("the cancelled call waited for the slot")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if cmd := <-other; cmd.Err() != nil || cmd.Val() != "still here" {
		t.Fatalf("queued call: %q, %v", cmd.Val(), cmd.Err())
	}
	if n := b.rdb.Exists(context.Background(), key).Val(); n != 0 {
		t.Fatal("the cancelled command was sent")
	}
}

// With Redis unreachable every call, queued or not, returns an error, and
// the slots come free.
func TestBatcherRedisDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer rdb.Close()
	b := &batcher{rdb: rdb, slots: 2}
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			cmd := redis.NewStringCmd(context.Background(), "echo", strconv.Itoa(i))
			if err := b.process(context.Background(), cmd); err == nil {
				t.Errorf("call %d succeeded with Redis down", i)
			}
		})
	}
	wg.Wait()
	b.waitFor(t, "every slot to be freed", func() bool { return b.busy == 0 && len(b.queue) == 0 })
}
