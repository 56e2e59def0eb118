package idemkafka

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// poller is what a loop polls: a *kgo.Client or a *kgo.GroupTransactSession.
type poller interface {
	PollRecords(ctx context.Context, maxPollRecords int) kgo.Fetches
	AllowRebalance()
}

// loop is the poll loop and the Run/Close bookkeeping of every consumer of
// the package: Run may be called once; Close stops it, waits for it, and
// then closes the client.
type loop struct {
	p        poller
	closeCl  func()
	batch    int
	log      *slog.Logger
	process  func(context.Context, kgo.Fetches) error
	mu       sync.Mutex
	started  bool
	closed   bool
	cancel   context.CancelFunc
	finished chan struct{}
}

// run polls and processes until ctx ends (ctx's error), the loop is closed
// (errClosed) or process fails (its error). Rebalances wait while a poll is
// processed (kgo.BlockRebalanceOnPoll, or the transact session's own block).
func (l *loop) run(ctx context.Context) error {
	l.mu.Lock()
	if l.closed || l.started {
		err := errRanOnce
		if l.closed {
			err = errClosed
		}
		l.mu.Unlock()
		return err
	}
	l.started = true
	ctx, cancel := context.WithCancel(ctx)
	l.cancel, l.finished = cancel, make(chan struct{})
	l.mu.Unlock()
	defer close(l.finished)
	defer cancel()
	for {
		fetches := l.p.PollRecords(ctx, l.batch)
		if fetches.IsClientClosed() {
			return errClosed
		}
		if err := ctx.Err(); err != nil {
			return err // nothing processed: the polled records are consumed again
		}
		fetches.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				l.log.Warn("idemkafka: fetch error", "topic", topic, "partition", p, "err", err)
			}
		})
		var err error
		if fetches.NumRecords() > 0 {
			err = l.process(ctx, fetches)
		}
		l.p.AllowRebalance()
		if err != nil {
			return err
		}
	}
}

// close stops run, waits for it to return, and closes the client.
func (l *loop) close() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	cancel, finished := l.cancel, l.finished
	l.mu.Unlock()
	if cancel != nil {
		cancel()
		<-finished
	}
	l.closeCl()
}
