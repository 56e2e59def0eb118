package keystore

import (
	"context"
	"sync"
	"sync/atomic"
)

// Notifier is implemented by stores that can tell a waiter at once that a
// key may have left in progress, so that [Await] (and with it [Do]'s
// WithWait, idemhttp, idemgrpc and the idem serve proxy) reserves again
// as soon as the holder completes or releases it, instead of at its next
// poll. Await keeps polling as the fallback and the bound: a notification
// that is lost or never sent costs a waiter one poll interval, never a
// wrong answer, since a waiter acts only on what Reserve returns.
//
// Notify returns a channel that is closed once the key may have changed
// after Notify returned: at the latest when a Complete, Release or Forget
// of key (in the same scope) that started after Notify returned has
// landed. It may be closed earlier or for other reasons (a change of
// another key, a reconnection): a spurious wake-up costs one Reserve. It
// is not closed when a lease merely expires. The caller subscribes first
// and then reserves, so that a change between the two is not missed:
// Notify returns only once the subscription is in place (ctx bounds that
// wait), or an error, after which the caller polls.
//
// stop frees what Notify took (a waiter's place, a subscription shared
// by the key's waiters); the caller calls it exactly once, whether the
// channel was closed or not. A store keeps one entry a watched key, not a
// goroutine or a connection a waiter: its memory grows with the keys being
// waited for, not with the waiters.
//
// A store whose type has the method but cannot notify as configured (a
// SQL store on SQLite, or without a listener) fails with an error wrapping
// errors.ErrUnsupported; Await then polls.
//
// Notify writes nothing: a crash of the waiter or of the holder leaves
// the key as it was, and the waiter's process, if alive, polls.
type Notifier interface {
	Notify(ctx context.Context, key string) (<-chan struct{}, func(), error)
}

// Notify calls s's [Notifier].
func Notify(ctx context.Context, s Store, key string) (<-chan struct{}, func(), error) {
	if n, ok := s.(Notifier); ok {
		return n.Notify(ctx, key)
	}
	return nil, nil, unsupported(s, "notify waiters")
}

// CanNotify reports whether s tells waiters of changes: it implements
// [Notifier], and so does every store it wraps (see [As]).
func CanNotify(s Store) bool {
	_, ok := As[Notifier](s)
	return ok
}

// Watchers is a table of watched keys for a [Notifier]: one channel a key,
// shared by the key's waiters and closed by [Watchers.Signal], and a count
// of them, so that its memory grows with the keys being waited for, not
// with the waiters. The zero Watchers is ready to use; it is safe for
// concurrent use. Stores use it to implement Notify: in-process stores
// signal from Complete and Release; stores over a server signal when the
// server's message about the key arrives, and use the first and last
// waiter of a key (see [Watchers.Add]) to subscribe and unsubscribe.
type Watchers struct {
	mu   sync.Mutex
	keys map[string]*watched
	n    atomic.Int64 // len(keys), read without the lock by Watching
}

type watched struct {
	ch chan struct{}
	n  int
}

// Add registers a waiter for key and returns the channel [Watchers.Signal]
// closes, stop, which removes the waiter (call it once), and whether the
// waiter is key's first, for a store that subscribes then. A store that
// must also unsubscribe passes onLast, which stop calls, outside the
// table's lock, when it removes the key's last waiter; it may be nil.
func (w *Watchers) Add(key string, onLast func()) (ch <-chan struct{}, stop func(), first bool) {
	w.mu.Lock()
	if w.keys == nil {
		w.keys = make(map[string]*watched)
	}
	k := w.keys[key]
	if k == nil {
		k = &watched{ch: make(chan struct{})}
		w.keys[key] = k
		w.n.Add(1)
		first = true
	}
	k.n++
	ch = k.ch // under the lock: Signal replaces it
	w.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			w.mu.Lock()
			last := false
			if k.n--; k.n == 0 && w.keys[key] == k {
				delete(w.keys, key)
				w.n.Add(-1)
				last = true
			}
			w.mu.Unlock()
			if last && onLast != nil {
				onLast()
			}
		})
	}, first
}

// Signal wakes every waiter of key: their channel is closed, and the key's
// later waiters get a new one. It reports whether key had waiters.
func (w *Watchers) Signal(key string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := w.keys[key]
	if k == nil {
		return false
	}
	close(k.ch)
	k.ch = make(chan struct{})
	return true
}

// SignalAll wakes every waiter of every key, as after a reconnection that
// may have lost messages.
func (w *Watchers) SignalAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, k := range w.keys {
		close(k.ch)
		k.ch = make(chan struct{})
	}
}

// Watching reports whether any key has waiters, without taking the
// table's lock: a store's Complete and Release check it before calling
// Signal, so that they cost nothing more while nobody waits.
func (w *Watchers) Watching() bool { return w.n.Load() > 0 }

// Keys returns the watched keys, for a store that subscribes to them again
// after a reconnection.
func (w *Watchers) Keys() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, 0, len(w.keys))
	for k := range w.keys {
		out = append(out, k)
	}
	return out
}

// Len returns the number of watched keys.
func (w *Watchers) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.keys)
}
