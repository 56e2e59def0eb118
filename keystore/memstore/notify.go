package memstore

import (
	"context"
	"fmt"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/keystore"
)

// Notify implements [keystore.Notifier]: the channel is closed by the
// Complete or Release of key in this scope (in this process: the store is
// in memory) that follows the call, or by Close. Waiters of one key share
// one channel; Complete and Release cost nothing more while nobody waits.
func (s *Store) Notify(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if err := keystore.ValidateInspect(ctx, key); err != nil {
		return nil, nil, fmt.Errorf("memstore: notify: %w", err)
	}
	if s.c.closed.Load() {
		return nil, nil, fmt.Errorf("memstore: notify: %w", idem.ErrClosed)
	}
	ch, stop, _ := s.c.watch.Add(s.prefix+key, nil)
	return ch, stop, nil
}

// signal wakes the waiters of key in s's scope, if any.
func (s *Store) signal(key string) {
	if s.c.watch.Watching() {
		s.c.watch.Signal(s.prefix + key)
	}
}
