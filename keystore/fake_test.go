package keystore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idem-go/idem/keystore"
)

// leaseStore is a small exact store that renews leases: enough of a Store
// for Do's keep-alive tests and examples, with a real clock.
type leaseStore struct {
	mu      sync.Mutex
	keys    map[string]*leaseEntry
	tokens  map[string]uint64
	extends atomic.Int32
	// extendErr, when set, makes every Extend fail with it.
	extendErr error
}

type leaseEntry struct {
	done   bool
	token  uint64
	exp    time.Time
	result []byte
}

func newLeaseStore() *leaseStore {
	return &leaseStore{keys: map[string]*leaseEntry{}, tokens: map[string]uint64{}}
}

func (s *leaseStore) Reserve(ctx context.Context, key string, fp []byte, lease time.Duration) (keystore.Claim, error) {
	if err := keystore.ValidateReserve(key, fp, lease); err != nil {
		return keystore.Claim{}, err
	}
	if err := ctx.Err(); err != nil {
		return keystore.Claim{}, fmt.Errorf("leaseStore: reserve: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	e := s.keys[key]
	if e != nil && now.Before(e.exp) {
		if e.done {
			return keystore.Claim{Key: key, State: keystore.Done, Expires: e.exp, Result: e.result}, nil
		}
		return keystore.Claim{Key: key, State: keystore.InProgress, Expires: e.exp}, nil
	}
	s.tokens[key]++
	ne := &leaseEntry{token: s.tokens[key], exp: now.Add(keystore.CapDuration(lease))}
	s.keys[key] = ne
	return keystore.Claim{Key: key, State: keystore.Acquired, Token: ne.token, Expires: ne.exp, Takeover: e != nil && !e.done}, nil
}

// held returns the in-progress entry of c, or ErrLeaseLost.
func (s *leaseStore) held(op string, c keystore.Claim) (*leaseEntry, error) {
	e := s.keys[c.Key]
	if e == nil || e.done || e.token != c.Token {
		return nil, keystore.LeaseLostError(op, c.Key, c.Token)
	}
	return e, nil
}

func (s *leaseStore) Complete(ctx context.Context, c keystore.Claim, result []byte, ttl time.Duration) error {
	if err := keystore.ValidateComplete(c, result, ttl, keystore.DefaultMaxResultSize); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("leaseStore: complete: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.keys[c.Key]; e != nil && e.done && e.token == c.Token {
		return nil
	}
	e, err := s.held("complete", c)
	if err != nil {
		return err
	}
	e.done, e.result, e.exp = true, append([]byte{}, result...), time.Now().Add(keystore.CapDuration(ttl))
	return nil
}

func (s *leaseStore) Release(ctx context.Context, c keystore.Claim) error {
	if err := keystore.ValidateRelease(c); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("leaseStore: release: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.held("release", c); err != nil {
		return err
	}
	delete(s.keys, c.Key)
	return nil
}

func (s *leaseStore) Extend(ctx context.Context, c keystore.Claim, lease time.Duration) (keystore.Claim, error) {
	if err := keystore.ValidateExtend(c, lease); err != nil {
		return keystore.Claim{}, err
	}
	if err := ctx.Err(); err != nil {
		return keystore.Claim{}, fmt.Errorf("leaseStore: extend: %w", err)
	}
	s.extends.Add(1)
	if s.extendErr != nil {
		return keystore.Claim{}, s.extendErr
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, err := s.held("extend", c)
	if err != nil {
		return keystore.Claim{}, err
	}
	e.exp = time.Now().Add(keystore.CapDuration(lease))
	c.Expires = e.exp
	return c, nil
}

// noExtend hides a store's Extend: a store that cannot renew leases.
type noExtend struct{ keystore.Store }
