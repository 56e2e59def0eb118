package natsstore

import (
	"context"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idem-go/idem/keystore"
)

// How waiters learn of a change: every write to a key is a message on the
// key's subject in the bucket's stream. A store watches the subject of
// each key being waited for with an ordered consumer of new messages (a
// KV watch of one key: one consumer a key, shared by its waiters, stopped
// with the key's last waiter) and wakes the waiters on a result or a
// delete marker; leases and renewals, which the waiters' own takeovers
// write, are ignored, so that waiters do not wake each other.

// watchers is a store's subscriptions, shared by its scoped views.
type watchers struct {
	mu   sync.Mutex
	keys map[string]*watched // by subject
}

type watched struct {
	ch    chan struct{} // closed by a result or a delete, then replaced
	n     int           // waiters
	ready chan struct{} // closed once sub and err are set
	cons  jetstream.ConsumeContext
	err   error
}

// Notify implements [keystore.Notifier]: the channel is closed when a
// result or a delete marker (Complete, Release, Forget) is published on
// key's subject. It returns once the stream has the key's consumer (the
// first waiter of a key creates it, one round trip to the stream's
// leader; later waiters share it), or ctx's error. A message is
// delivered once stored, so the Reserve that follows a wake-up sees it.
func (s *Store) Notify(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if err := keystore.ValidateInspect(ctx, key); err != nil {
		return nil, nil, fmt.Errorf("natsstore: notify: %w", err)
	}
	w, subject := s.watch, s.Subject(key)
	w.mu.Lock()
	if w.keys == nil {
		w.keys = make(map[string]*watched)
	}
	e := w.keys[subject]
	first := e == nil
	if first {
		e = &watched{ch: make(chan struct{}), ready: make(chan struct{})}
		w.keys[subject] = e
	}
	e.n++
	ch := e.ch
	w.mu.Unlock()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			w.mu.Lock()
			last := false
			if e.n--; e.n == 0 && w.keys[subject] == e {
				delete(w.keys, subject)
				last = true
			}
			w.mu.Unlock()
			if last {
				<-e.ready // the consumer is set (or failed)
				if e.cons != nil {
					e.cons.Stop()
				}
			}
		})
	}
	if first {
		// Subscribed under a context of the store's, not the waiter's: the
		// key's other waiters share the outcome.
		go s.subscribe(w, subject, e)
	}
	select {
	case <-e.ready:
		if e.err != nil {
			stop()
			return nil, nil, fmt.Errorf("natsstore: notify %q: %w", key, e.err)
		}
		return ch, stop, nil
	case <-ctx.Done():
		stop()
		return nil, nil, fmt.Errorf("natsstore: notify %q: %w", key, ctx.Err())
	}
}

// subscribe starts an ordered consumer of subject's new messages for e:
// the stream delivers a message once it is stored, so that the waiter's
// next Reserve, which reads from the stream leader, sees it (a core NATS
// subscription would see a write as it is published, before it is
// stored, and even when it is refused). It sets e.cons or e.err and
// closes e.ready. The consumer survives a reconnection or a leader
// change: the ordered consumer is recreated from where it was.
func (s *Store) subscribe(w *watchers, subject string, e *watched) {
	defer close(e.ready)
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	cons, err := s.js.OrderedConsumer(ctx, s.stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subject},
		DeliverPolicy:  jetstream.DeliverNewPolicy,
	})
	if err != nil {
		e.err = err
		return
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if !settles(m.Headers(), m.Data()) {
			return
		}
		w.mu.Lock()
		close(e.ch)
		e.ch = make(chan struct{})
		w.mu.Unlock()
	})
	if err != nil {
		e.err = err
		return
	}
	e.cons = cc
}

// settles reports whether a message takes its key out of progress: a
// result or a delete marker (of Release or Forget, or the server's), not
// a lease or a renewal.
func settles(h nats.Header, data []byte) bool {
	if h.Get("KV-Operation") != "" || h.Get("Nats-Marker-Reason") != "" {
		return true
	}
	return len(data) > 0 && data[0] == 'D'
}
