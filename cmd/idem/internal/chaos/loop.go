package chaos

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Loop timing and sizes.
const (
	tickEvery     = time.Millisecond
	progressEvery = 100 * time.Millisecond
	// drainTimeout bounds how long workers may take to finish and exit
	// after their stdin is closed; then they are killed.
	drainTimeout = 30 * time.Second
	// prefetch is how many deliveries a worker holds at once (the batch
	// strategy holds maxBatch). With one, a worker gets a delivery only
	// when idle, so copies published back to back are processed at the
	// same time by two workers.
	prefetch = 1
	// spares is how many started, ready workers wait to replace a killed
	// one, so that a crash costs the time to notice it, not a process
	// start.
	spares = 2
	// maxStartFailures: this many workers in a row failing before they
	// are ready end the run with an error (a wrong DSN, a missing driver).
	maxStartFailures = 3
)

// pendingKill is a harness SIGKILL scheduled for a worker.
type pendingKill struct {
	due time.Time
	p   *proc
}

// runLoop runs the broker for one strategy: it starts the workers, feeds
// them, replaces the ones that die, and when every copy is acknowledged (or
// ctx ends, or the run fails) stops them and waits until every one has
// exited. Everything here runs on Run's goroutine.
type runLoop struct {
	h   *harness
	ctx context.Context
	idx int
	s   *impl
	ns  namespace
	b   *broker
	res *strategyResult

	events  chan event
	procs   []*proc // active workers, by slot
	spares  []*proc
	live    map[*proc]bool // started and not yet reaped
	hold    int
	kills   []pendingKill
	rr      int
	err     error
	failed  int // start failures in a row
	started bool
	drain   bool

	t0, lastProgress, drainDeadline, startDeadline time.Time
}

func (l *runLoop) run() error {
	l.events = make(chan event, 64)
	l.procs = make([]*proc, l.h.cfg.consumers)
	l.live = map[*proc]bool{}
	l.hold = prefetch
	if l.s.batch != nil {
		l.hold = maxBatch
	}
	for slot := range l.procs {
		l.procs[slot] = l.spawn(slot, 0)
	}
	for range spares {
		l.spares = append(l.spares, l.spawn(-1, 0))
	}
	l.startDeadline = time.Now().Add(l.h.cfg.startTimeout)
	ticker := time.NewTicker(tickEvery)
	defer ticker.Stop()
	for len(l.live) > 0 {
		l.checkEnd()
		select {
		case ev := <-l.events:
			l.event(ev, time.Now())
		case now := <-ticker.C:
			l.tick(now)
		}
		if !l.drain && l.err == nil && l.begin() {
			l.dispatch(time.Now())
		}
	}
	if l.err == nil && !l.b.done() {
		l.err = fmt.Errorf("chaos: %s: workers ended with %d copies unacknowledged", l.s.Name, l.b.pending)
	}
	return l.err
}

// spawn starts a worker for slot (-1: a spare). On failure it records the
// error and returns nil.
func (l *runLoop) spawn(slot, gen int) *proc {
	if l.err != nil {
		return nil
	}
	p, err := l.h.startProc(l.ctx, slot, gen, l.h.helloFor(l.s, l.ns, slot), l.events)
	if err != nil {
		l.err = err
		return nil
	}
	l.live[p] = true
	return p
}

// checkEnd starts stopping the workers when the run is over.
func (l *runLoop) checkEnd() {
	if l.drain {
		return
	}
	switch {
	case l.err != nil:
		l.stop(false)
	case l.ctx.Err() != nil:
		l.err = fmt.Errorf("chaos: %s: %w (%d of %d copies acknowledged)", l.s.Name, l.ctx.Err(), l.b.total-l.b.pending, l.b.total)
		l.stop(false)
	case l.started && l.b.done():
		l.res.Seconds = time.Since(l.t0).Seconds()
		l.stop(true)
	}
}

// stop closes every worker's stdin (graceful: it finishes what it holds
// and exits) or kills it.
func (l *runLoop) stop(graceful bool) {
	l.drain = true
	l.drainDeadline = time.Now().Add(drainTimeout)
	for p := range l.live {
		p.stopping = true
		if graceful {
			_ = p.stdin.Close()
		} else {
			p.kill()
		}
	}
}

// begin reports whether deliveries may flow: once every slot's first
// worker is ready, the clock starts.
func (l *runLoop) begin() bool {
	if l.started {
		return true
	}
	for _, p := range l.procs {
		if p == nil || !p.ready {
			return false
		}
	}
	l.started, l.t0 = true, time.Now()
	return true
}

func (l *runLoop) event(ev event, now time.Time) {
	p := ev.p
	if ev.exit {
		l.exited(p, ev.err)
		return
	}
	switch ev.f.kind {
	case kindReady:
		p.ready = true
		l.failed = 0
		l.h.cfg.logger.Debug("chaos: worker ready", "strategy", l.s.Name, "slot", p.slot, "took", now.Sub(p.started))
	case kindAck:
		delete(p.held, ev.f.tag)
		l.b.ack(p, ev.f.tag, ev.f.code)
	case kindNack:
		delete(p.held, ev.f.tag)
		l.b.nack(p, ev.f.tag, ev.f.code, now)
		l.h.cfg.logger.Debug("chaos: nack", "strategy", l.s.Name, "reason", ev.f.code, "err", string(ev.f.payload))
	case kindFatal:
		p.fatal = string(ev.f.payload)
	default:
		p.readErr = fmt.Errorf("%w: worker sent frame %q", errProtocol, ev.f.kind)
		p.kill()
	}
}

// exited reaps p: its deliveries are redelivered, and unless the run is
// stopping, a spare (or a new process) takes its place.
func (l *runLoop) exited(p *proc, readErr error) {
	delete(l.live, p)
	p.exited, p.state, p.readErr = true, p.cmd.ProcessState, readErr
	_ = p.stdin.Close()
	l.b.lost(p, p.held)
	p.held = nil
	if p.crashed() {
		l.b.c.crashes++
	}
	if p.stopping || l.drain {
		return
	}
	if !p.crashed() || !p.ready {
		l.b.c.workerErrors++
		l.h.cfg.logger.Warn("chaos: worker ended unexpectedly", "strategy", l.s.Name, "worker", p.describe())
		if !p.ready {
			if l.failed++; l.failed >= maxStartFailures {
				l.err = fmt.Errorf("chaos: %s: workers fail to start: %s", l.s.Name, p.describe())
				return
			}
		}
	}
	if i := slices.Index(l.spares, p); i >= 0 {
		l.spares[i] = l.spawn(-1, p.gen+1)
		return
	}
	for i, sp := range l.spares {
		if sp != nil && sp.ready {
			sp.slot, sp.gen = p.slot, p.gen+1
			l.procs[p.slot] = sp
			l.spares[i] = l.spawn(-1, 0)
			return
		}
	}
	l.procs[p.slot] = l.spawn(p.slot, p.gen+1)
}

func (l *runLoop) tick(now time.Time) {
	if l.drain {
		if now.After(l.drainDeadline) {
			for p := range l.live {
				p.kill()
			}
		}
		return
	}
	if !l.started && now.After(l.startDeadline) {
		l.err = fmt.Errorf("chaos: %s: workers not ready after %v", l.s.Name, l.h.cfg.startTimeout)
		return
	}
	l.b.tick(now)
	kept := l.kills[:0]
	for _, k := range l.kills {
		switch {
		case k.p.exited:
		case now.Before(k.due):
			kept = append(kept, k)
		default:
			k.p.kill()
			l.b.c.kills++
		}
	}
	l.kills = kept
	if f := l.h.cfg.progress; f != nil && l.started && now.Sub(l.lastProgress) >= progressEvery {
		l.lastProgress = now
		f(Progress{Strategy: l.s.Name, Index: l.idx, Strategies: len(l.h.cfg.strategies),
			Done: l.b.total - l.b.pending, Total: l.b.total, Delivered: l.b.c.delivered, Crashes: l.b.c.crashes, Elapsed: now.Sub(l.t0)})
	}
}

// dispatch hands out deliveries one at a time, round robin, to workers
// with room, so that copies published back to back go to different
// workers at once.
func (l *runLoop) dispatch(now time.Time) {
	n := len(l.procs)
	for sent := true; sent; {
		sent = false
		for i := range n {
			p := l.procs[(l.rr+i)%n]
			if p == nil || !p.ready || p.exited || len(p.held) >= l.hold {
				continue
			}
			d, f, ok := l.b.next(p, now)
			if !ok {
				continue
			}
			p.send(d)
			sent = true
			if f.kill {
				l.kills = append(l.kills, pendingKill{due: now.Add(f.killDelay), p: p})
			}
		}
		l.rr++
	}
	for _, p := range l.procs {
		if p != nil && !p.exited {
			p.flush()
		}
	}
}
