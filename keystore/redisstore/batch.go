package redisstore

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/keystore"
)

// batcher sends a store's commands to Redis, at most slots round trips at a
// time. A command that finds a slot free goes out at once on the caller's
// goroutine, exactly as a plain go-redis call does; one that finds every
// slot busy is queued, and the first slot to come free takes the whole queue
// out as one pipeline. Under light load nothing waits and nothing is
// batched; under heavy load N waiting calls cost one round trip (one write
// and one read on each side) instead of N, which is what bounds a Redis
// client on a loaded host. Each command is still its own atomic script on
// the server; only the trip there and back is shared.
//
// go-redis's own AutoPipeliner batches too, but hands every command to a
// flusher goroutine even when it is alone, which doubles the latency of a
// lone caller (see docs/benchmarks.md); a store given an *AutoPipeliner uses
// it as it is, without this layer.
type batcher struct {
	rdb   redis.UniversalClient
	slots int // 0: every command goes out on its own

	mu    sync.Mutex
	busy  int // slots in use
	queue []*queued
}

type queued struct {
	ctx  context.Context
	cmd  redis.Cmder
	done chan struct{} // closed once cmd holds its reply or error
}

// process sends cmd and returns its reply. ctx only decides whether cmd is
// sent at all: a command that ends up not sent (its ctx ended first,
// before it went out or while it waited in the queue) returns ctx.Err() at
// once, and one that went out waits for its reply, under
// keystore.Detach(ctx), whatever ctx does meanwhile. A script whose reply
// a cancelled caller stopped reading may have run (a Reserve that holds
// the key, a Complete that stored the result), so the caller must not be
// told context.Canceled then.
func (b *batcher) process(ctx context.Context, cmd redis.Cmder) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if b.slots == 0 {
		return processDetached(ctx, b.rdb, cmd)
	}
	b.mu.Lock()
	if b.busy < b.slots {
		b.busy++
		b.mu.Unlock()
		defer b.release()
		return processDetached(ctx, b.rdb, cmd)
	}
	q := &queued{ctx: ctx, cmd: cmd, done: make(chan struct{})}
	b.queue = append(b.queue, q)
	b.mu.Unlock()
	select {
	case <-q.done:
		return cmd.Err()
	case <-ctx.Done():
	}
	b.mu.Lock()
	for i, o := range b.queue {
		if o == q { // not taken by a sender: withdraw it, never sent
			b.queue = append(b.queue[:i], b.queue[i+1:]...)
			b.mu.Unlock()
			return ctx.Err()
		}
	}
	b.mu.Unlock()
	// A sender took it: it is being sent, or send found ctx ended and did
	// not send it. Either way its error says which.
	<-q.done
	return cmd.Err()
}

// processDetached sends cmd on rdb under keystore.Detach(ctx).
func processDetached(ctx context.Context, rdb redis.UniversalClient, cmd redis.Cmder) error {
	dctx, cancel := keystore.Detach(ctx)
	defer cancel()
	return rdb.Process(dctx, cmd)
}

// release frees the caller's slot or, if calls are waiting, hands it to a
// goroutine that sends them, so that the caller returns at once.
func (b *batcher) release() {
	b.mu.Lock()
	if len(b.queue) == 0 {
		b.busy--
		b.mu.Unlock()
		return
	}
	batch := b.queue
	b.queue = nil
	b.mu.Unlock()
	go b.drain(batch)
}

// drain sends batch as one pipeline, then whatever queued meanwhile, until
// the queue is empty; then it frees its slot.
func (b *batcher) drain(batch []*queued) {
	for {
		b.send(batch)
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.busy--
			b.mu.Unlock()
			return
		}
		batch, b.queue = b.queue, batch[:0]
		b.mu.Unlock()
	}
}

// send runs the batch's commands whose callers' contexts are live in one
// pipeline and wakes every caller. The pipeline runs under the first
// caller's context values but no caller's cancellation or deadline
// (keystore.Detach): one caller giving up must not fail the others, nor
// turn its own command's true reply into an error.
func (b *batcher) send(batch []*queued) {
	defer func() {
		for i, q := range batch {
			close(q.done)
			batch[i] = nil
		}
	}()
	var first context.Context
	cmds := make([]redis.Cmder, 0, len(batch))
	for _, q := range batch {
		if err := q.ctx.Err(); err != nil {
			q.cmd.SetErr(err) // never sent: its caller is told so
			continue
		}
		if first == nil {
			first = q.ctx
		}
		cmds = append(cmds, q.cmd)
	}
	if len(cmds) == 0 {
		return
	}
	ctx, cancel := keystore.Detach(first)
	defer cancel()
	switch len(cmds) {
	case 1: // one command needs no pipeline
		_ = b.rdb.Process(ctx, cmds[0])
	default:
		pipe := b.rdb.Pipeline()
		for _, cmd := range cmds {
			_ = pipe.Process(ctx, cmd)
		}
		_, _ = pipe.Exec(ctx)
	}
}
