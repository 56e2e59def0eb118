package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idem-go/idem/keystore"
)

// maxHeld bounds the keys heldKeys remembers: past it, new reservations
// are shown without their age until some settle.
const maxHeld = 1 << 16

// heldKeys remembers when this process reserved each key it still holds,
// and for which route, for the operator page: stores do not record when a
// lease began, and a store key ("http:…", a digest) does not say which
// route it belongs to. An entry lives from an acquiring Reserve to the
// Complete or Release of that claim, so its size is the number of requests
// in flight (at most maxHeld).
type heldKeys struct {
	mu  sync.Mutex
	m   map[string]heldKey
	now func() time.Time
}

type heldKey struct {
	token uint64
	since time.Time
	route string
}

func newHeldKeys() *heldKeys { return &heldKeys{m: map[string]heldKey{}, now: time.Now} }

// wrap returns s recording route's reservations in h.
func (h *heldKeys) wrap(s keystore.Store, route string) keystore.Store {
	return &heldStore{Store: s, h: h, route: route}
}

// lookup returns what h knows of key's lease under token: ok is false when
// this process did not reserve it (another process did, or it was reserved
// before), or a takeover gave it a new token.
func (h *heldKeys) lookup(key string, token uint64) (heldKey, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	k, ok := h.m[key]
	return k, ok && k.token == token
}

func (h *heldKeys) add(key string, token uint64, route string) {
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.m[key]; ok || len(h.m) < maxHeld {
		h.m[key] = heldKey{token: token, since: now, route: route}
	}
}

// drop forgets key's lease under token; a newer lease of the key stays.
func (h *heldKeys) drop(key string, token uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if k, ok := h.m[key]; ok && k.token == token {
		delete(h.m, key)
	}
}

// heldStore is a Store whose acquiring Reserves are recorded in h until
// their Complete or Release (whatever its result: the claim is settled or
// lost either way). It renews leases when the store it wraps does
// (keystore.As walks Unwrap).
type heldStore struct {
	keystore.Store
	h     *heldKeys
	route string
}

// Unwrap returns the wrapped store, for keystore.As.
func (s *heldStore) Unwrap() keystore.Store { return s.Store }

// Notify forwards to the wrapped store's Notifier, so that duplicates
// waiting behind the admin mode are woken as without it (keystore.As
// finds a Notifier only where every layer has one).
func (s *heldStore) Notify(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	return keystore.Notify(ctx, s.Store, key)
}

// Peek forwards to the wrapped store's Peeker; it reserves nothing, so
// there is nothing to record.
func (s *heldStore) Peek(ctx context.Context, key string, fp []byte) (keystore.Claim, bool) {
	return keystore.Peek(ctx, s.Store, key, fp)
}

func (s *heldStore) Reserve(ctx context.Context, key string, fp []byte, lease time.Duration) (keystore.Claim, error) {
	c, err := s.Store.Reserve(ctx, key, fp, lease)
	if err == nil && c.State == keystore.Acquired {
		s.h.add(key, c.Token, s.route)
	}
	return c, err
}

func (s *heldStore) Complete(ctx context.Context, c keystore.Claim, result []byte, ttl time.Duration) error {
	defer s.h.drop(c.Key, c.Token)
	return s.Store.Complete(ctx, c, result, ttl)
}

func (s *heldStore) Release(ctx context.Context, c keystore.Claim) error {
	defer s.h.drop(c.Key, c.Token)
	return s.Store.Release(ctx, c)
}

// Extend implements keystore.Extender by the wrapped store's.
func (s *heldStore) Extend(ctx context.Context, c keystore.Claim, lease time.Duration) (keystore.Claim, error) {
	e, ok := keystore.As[keystore.Extender](s.Store)
	if !ok {
		return c, fmt.Errorf("%T cannot renew leases: %w", s.Store, errors.ErrUnsupported)
	}
	return e.Extend(ctx, c, lease)
}
