package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/idem-go/idem/adapters/idemwatermill"
	"github.com/idem-go/idem/keystore/memstore"
)

// The Watermill comparison: n events, each published twice (a producer's
// retry), through Watermill's Router and its in-process gochannel pub/sub,
// deduplicated by idemwatermill (memstore) or by Watermill's Deduplicator
// keyed by the event id (msg.UUID). The handler's effect is counted per
// event; with failEvery > 0 the first attempt of every failEvery-th event
// fails (the router nacks it and gochannel redelivers it).

const (
	wmIdem  = "idemwatermill"
	wmDedup = "Deduplicator (event id)"
	wmAdler = "Deduplicator (default Adler-32)"
)

type wmResult struct {
	published int
	lost      int // events whose effect never ran
	doubled   int // events whose effect ran more than once
	elapsed   time.Duration
	cpu       time.Duration // this process's CPU
}

func (r wmResult) rate() float64 { return float64(r.published) / r.elapsed.Seconds() }
func (r wmResult) cpuPer() float64 {
	return float64(r.cpu.Nanoseconds()) / 1e3 / float64(r.published)
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// wmPayload is an ~80-byte JSON event, distinct per event.
func wmPayload(i int) []byte {
	return []byte(`{"type":"order.created","order_id":"o-` + strconv.Itoa(100000+i) + `","amount":1299,"currency":"EUR"}`)
}

var errFirstAttempt = errors.New("peerbench: the first attempt fails")

// newDedup returns one side's middleware and what closes its store.
func newDedup(side string) (message.HandlerMiddleware, func(), error) {
	switch side {
	case wmIdem:
		s, err := memstore.New()
		if err != nil {
			return nil, nil, err
		}
		m, err := idemwatermill.NewMiddleware(s)
		if err != nil {
			return nil, nil, err
		}
		return m.Middleware, func() { _ = s.Close() }, nil
	case wmDedup, wmAdler:
		repo, err := middleware.NewMapExpiringKeyRepository(time.Hour)
		if err != nil {
			return nil, nil, err
		}
		d := &middleware.Deduplicator{Repository: repo}
		if side == wmDedup {
			d.KeyFactory = func(m *message.Message) (string, error) { return m.UUID, nil }
		}
		return d.Middleware, func() {}, nil
	}
	return nil, nil, fmt.Errorf("peerbench: unknown side %q", side)
}

// runWatermill publishes n events twice through one side's middleware.
func runWatermill(side string, n, failEvery int) (wmResult, error) {
	logger := watermill.NopLogger{}
	pubsub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: int64(2 * n)}, logger)
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, logger)
	if err != nil {
		return wmResult{}, err
	}
	dedup, closeStore, err := newDedup(side)
	if err != nil {
		return wmResult{}, err
	}
	effects := make([]atomic.Int32, n)
	attempts := make([]atomic.Int32, n)
	var acked atomic.Int64
	done := make(chan struct{})
	var doneOnce sync.Once
	total := int64(2 * n)
	effect := func(msg *message.Message) ([]*message.Message, error) {
		i, err := strconv.Atoi(msg.Metadata.Get("i"))
		if err != nil {
			return nil, err
		}
		if attempts[i].Add(1) == 1 && failEvery > 0 && i%failEvery == 0 {
			return nil, errFirstAttempt
		}
		effects[i].Add(1)
		return nil, nil
	}
	inner := dedup(effect)
	handler := func(msg *message.Message) ([]*message.Message, error) {
		out, err := inner(msg)
		if err == nil && acked.Add(1) == total {
			doneOnce.Do(func() { close(done) })
		}
		return out, err
	}
	router.AddConsumerHandler("peerbench", "events", pubsub, func(msg *message.Message) error { _, err := handler(msg); return err })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- router.Run(ctx) }()
	<-router.Running()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = watermill.NewUUID()
	}
	cpu0 := selfCPU()
	start := time.Now()
	for range 2 {
		for i := range n {
			msg := message.NewMessage(ids[i], wmPayload(i))
			msg.Metadata.Set("i", strconv.Itoa(i))
			if err := pubsub.Publish("events", msg); err != nil {
				return wmResult{}, err
			}
		}
	}
	timeout := time.After(2 * time.Minute)
	select {
	case <-done:
	case <-timeout:
		return wmResult{}, fmt.Errorf("peerbench: %s: %d of %d messages acknowledged after 2 minutes", side, acked.Load(), total)
	}
	res := wmResult{published: int(total), elapsed: time.Since(start), cpu: selfCPU() - cpu0}
	for i := range effects {
		switch effects[i].Load() {
		case 0:
			res.lost++
		case 1:
		default:
			res.doubled++
		}
	}
	cancel()
	_ = router.Close()
	_ = pubsub.Close()
	closeStore()
	<-runErr
	return res, nil
}
