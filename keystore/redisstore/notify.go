package redisstore

import (
	"context"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/keystore"
)

// How waiters learn of a change: the Complete and Release scripts publish
// an empty message on a channel named as the key's Redis key (channels and
// keys are separate namespaces, so the name shares the key's hash slot),
// with PUBLISH on a single Redis or Sentinel, SPUBLISH (sharded pub/sub,
// Redis 7) on a Cluster, where a plain PUBLISH would be broadcast to every
// node. A PUBLISH to a channel nobody listens to costs Redis a dictionary
// lookup.
//
// A store subscribes on one connection (on a Cluster, one a hash tag: a
// sharded subscription serves one slot) shared by all its scopes and
// waiters, and only while somebody waits: a goroutine owns each
// connection, subscribes to the keys being waited for, unsubscribes from
// the others, and closes the connection and ends when none is left.
// go-redis reconnects a dropped subscription and subscribes again; the
// confirmation then wakes the key's waiters, since messages may have been
// lost meanwhile.

// hub is a store's subscriptions, shared by its scoped views.
type hub struct {
	rdb     redis.UniversalClient
	sharded bool

	mu     sync.Mutex
	groups map[string]*group // by hash tag on a Cluster, else ""
}

// group is one subscription connection and the keys it serves.
type group struct {
	ps   *redis.PubSub
	keys map[string]*entry // the Redis keys being waited for
	kick chan struct{}     // capacity 1: keys changed, reconcile
}

// entry is one watched key: its waiters share ch.
type entry struct {
	ch    chan struct{} // closed by a message, then replaced
	n     int           // waiters
	ready chan struct{} // closed once the subscription is confirmed
	isSet bool          // ready is closed
}

func newHub(rdb redis.UniversalClient) *hub {
	_, cluster := rdb.(*redis.ClusterClient)
	return &hub{rdb: rdb, sharded: cluster}
}

// Notify implements [keystore.Notifier]: the channel is closed by a
// message the Complete or Release of key publishes, or when the
// subscription reconnects. It returns once Redis has confirmed the
// subscription (at once if other waiters of key have it), or ctx's error.
// Waiters of one key share one channel; a store (with its scopes) holds
// one subscription connection (one a hash tag on a Cluster), and only
// while somebody waits.
func (s *Store) Notify(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if err := keystore.ValidateInspect(ctx, key); err != nil {
		return nil, nil, fmt.Errorf("redisstore: notify: %w", err)
	}
	gk := ""
	if s.hub.sharded {
		gk = s.tag(key)
	}
	return s.hub.watch(ctx, gk, s.RedisKey(key))
}

func (h *hub) watch(ctx context.Context, gk, rkey string) (<-chan struct{}, func(), error) {
	h.mu.Lock()
	if h.groups == nil {
		h.groups = make(map[string]*group)
	}
	g := h.groups[gk]
	if g == nil {
		g = &group{keys: make(map[string]*entry), kick: make(chan struct{}, 1)}
		if h.sharded {
			g.ps = h.rdb.SSubscribe(context.Background())
		} else {
			g.ps = h.rdb.Subscribe(context.Background())
		}
		h.groups[gk] = g
		go h.run(gk, g)
	}
	e := g.keys[rkey]
	if e == nil {
		e = &entry{ch: make(chan struct{}), ready: make(chan struct{})}
		g.keys[rkey] = e
		g.poke()
	}
	e.n++
	ch, ready := e.ch, e.ready
	h.mu.Unlock()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			h.mu.Lock()
			if e.n--; e.n == 0 {
				delete(g.keys, rkey)
				g.poke()
			}
			h.mu.Unlock()
		})
	}
	select {
	case <-ready:
		return ch, stop, nil
	case <-ctx.Done():
		stop()
		return nil, nil, fmt.Errorf("redisstore: notify: subscription to %q not confirmed: %w", rkey, ctx.Err())
	}
}

// poke asks the group's goroutine to reconcile. Called with h.mu held.
func (g *group) poke() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// Subscription states in run's map.
const (
	asked     = 1 // SUBSCRIBE sent
	confirmed = 2 // and confirmed by Redis
)

// run owns g's connection: it subscribes to the keys being waited for,
// unsubscribes from the others, wakes waiters on messages, and closes the
// connection once no key is left.
//
// The first subscription is sent before anything reads the connection:
// go-redis connects a PubSub on its first use, and on a Cluster to the
// master of its first channel's slot, but to a random node when that
// first use is a read with no channel yet; a sharded subscription sent
// there is refused (MOVED) and never confirmed.
func (h *hub) run(gk string, g *group) {
	defer g.ps.Close()
	on := make(map[string]int8)
	if !h.reconcile(gk, g, on) {
		return
	}
	msgs := g.ps.ChannelWithSubscriptions(redis.WithChannelSize(256))
	for {
		select {
		case m, ok := <-msgs:
			if !ok { // closed under us: let the next waiter start anew
				h.mu.Lock()
				if h.groups[gk] == g {
					delete(h.groups, gk)
				}
				h.mu.Unlock()
				return
			}
			h.receive(g, m, on)
		case <-g.kick:
			if !h.reconcile(gk, g, on) {
				return
			}
		}
	}
}

// reconcile subscribes to the keys waited for and not yet subscribed,
// unsubscribes from those nobody waits for, and makes ready the new
// waiters of keys already confirmed. It reports false, having removed g
// from the hub, when no key is left.
func (h *hub) reconcile(gk string, g *group, on map[string]int8) bool {
	h.mu.Lock()
	if len(g.keys) == 0 {
		delete(h.groups, gk)
		h.mu.Unlock()
		return false
	}
	var sub, unsub []string
	for k, e := range g.keys {
		switch on[k] {
		case 0:
			sub = append(sub, k)
		case confirmed:
			e.setReady() // a new waiter of a key still subscribed
		}
	}
	for k := range on {
		if g.keys[k] == nil {
			unsub = append(unsub, k)
		}
	}
	h.mu.Unlock()
	h.send(g, sub, unsub, on)
	return true
}

// send subscribes to sub and unsubscribes from unsub on g's connection.
// A failed write leaves the keys to go-redis's reconnection (it subscribes
// again to every channel it was asked for) or to the waiters' polls.
func (h *hub) send(g *group, sub, unsub []string, on map[string]int8) {
	ctx, cancel := context.WithTimeout(context.Background(), keystore.CallTimeout)
	defer cancel()
	subscribe, unsubscribe := g.ps.Subscribe, g.ps.Unsubscribe
	if h.sharded {
		subscribe, unsubscribe = g.ps.SSubscribe, g.ps.SUnsubscribe
	}
	if len(unsub) > 0 {
		_ = unsubscribe(ctx, unsub...)
		for _, k := range unsub {
			delete(on, k)
		}
	}
	if len(sub) > 0 {
		_ = subscribe(ctx, sub...)
		for _, k := range sub {
			on[k] = asked
		}
	}
}

// receive handles one message of g's connection: a confirmation makes
// the key's waiters ready (and, for a key confirmed before, wakes them:
// the connection was re-established, and messages may have been lost
// meanwhile); a message wakes the key's waiters.
func (h *hub) receive(g *group, m any, on map[string]int8) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch m := m.(type) {
	case *redis.Subscription:
		if (m.Kind != "subscribe" && m.Kind != "ssubscribe") || on[m.Channel] == 0 {
			return // an unsubscription, or a key given up since
		}
		again := on[m.Channel] == confirmed
		on[m.Channel] = confirmed
		if e := g.keys[m.Channel]; e != nil {
			if again {
				e.wake()
			}
			e.setReady()
		}
	case *redis.Message:
		if e := g.keys[m.Channel]; e != nil {
			e.wake()
		}
	}
}

// wake closes e's channel and gives its later waiters a new one. Called
// with h.mu held.
func (e *entry) wake() {
	close(e.ch)
	e.ch = make(chan struct{})
}

// setReady tells e's waiters that the subscription is in place. Called
// with h.mu held.
func (e *entry) setReady() {
	if !e.isSet {
		e.isSet = true
		close(e.ready)
	}
}
