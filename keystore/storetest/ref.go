package storetest

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/keystore"
)

// RefStore is a small, exact, in-memory [keystore.Store] that also
// implements [keystore.Extender], with the real clock: a reference for the
// suite and a test double for code built on keystore (as fstest.MapFS is
// for fs.FS). It passes [Run]. It keeps every key until the process ends;
// use memstore or a real store outside tests.
type RefStore struct {
	mu     sync.Mutex
	keys   map[string]*refEntry
	tokens map[string]uint64
	fail   error
	// Extends counts the Extend calls that passed validation.
	Extends atomic.Int32
}

type refEntry struct {
	done   bool
	token  uint64
	fp     []byte
	exp    time.Time
	result []byte
}

var _ keystore.Extender = (*RefStore)(nil)

// NewRefStore returns an empty RefStore.
func NewRefStore() *RefStore {
	return &RefStore{keys: map[string]*refEntry{}, tokens: map[string]uint64{}}
}

// FailExtend makes every later Extend fail with err (nil: succeed again),
// as a store that cannot be reached would.
func (s *RefStore) FailExtend(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = err
}

// Reserve implements [keystore.Store.Reserve].
func (s *RefStore) Reserve(ctx context.Context, key string, fp []byte, lease time.Duration) (keystore.Claim, error) {
	if err := s.enter(ctx, "reserve", keystore.ValidateReserve(key, fp, lease)); err != nil {
		return keystore.Claim{}, err
	}
	defer s.mu.Unlock()
	now := time.Now()
	e := s.keys[key]
	if e != nil && now.Before(e.exp) {
		if idem.FingerprintsConflict(e.fp, fp) {
			return keystore.Claim{}, keystore.MismatchError(key)
		}
		if e.done {
			return keystore.Claim{Key: key, State: keystore.Done, Expires: e.exp, Result: bytes.Clone(e.result)}, nil
		}
		return keystore.Claim{Key: key, State: keystore.InProgress, Expires: e.exp}, nil
	}
	s.tokens[key]++
	ne := &refEntry{token: s.tokens[key], fp: bytes.Clone(fp), exp: now.Add(keystore.CapDuration(lease))}
	s.keys[key] = ne
	return keystore.Claim{Key: key, State: keystore.Acquired, Token: ne.token, Expires: ne.exp, Takeover: e != nil && !e.done}, nil
}

// held returns the in-progress entry of c, or an error wrapping ErrLeaseLost.
func (s *RefStore) held(op string, c keystore.Claim) (*refEntry, error) {
	e := s.keys[c.Key]
	if e == nil || e.done || e.token != c.Token {
		return nil, keystore.LeaseLostError(op, c.Key, c.Token)
	}
	return e, nil
}

// Complete implements [keystore.Store.Complete].
func (s *RefStore) Complete(ctx context.Context, c keystore.Claim, result []byte, ttl time.Duration) error {
	if err := s.enter(ctx, "complete", keystore.ValidateComplete(c, result, ttl, keystore.DefaultMaxResultSize)); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if e := s.keys[c.Key]; e != nil && e.done && e.token == c.Token {
		return nil // completing again keeps the first result
	}
	e, err := s.held("complete", c)
	if err != nil {
		return err
	}
	e.done, e.result, e.exp = true, bytes.Clone(result), time.Now().Add(keystore.CapDuration(ttl))
	return nil
}

// Release implements [keystore.Store.Release].
func (s *RefStore) Release(ctx context.Context, c keystore.Claim) error {
	if err := s.enter(ctx, "release", keystore.ValidateRelease(c)); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if _, err := s.held("release", c); err != nil {
		return err
	}
	delete(s.keys, c.Key)
	return nil
}

// Extend implements [keystore.Extender].
func (s *RefStore) Extend(ctx context.Context, c keystore.Claim, lease time.Duration) (keystore.Claim, error) {
	if err := s.enter(ctx, "extend", keystore.ValidateExtend(c, lease)); err != nil {
		return keystore.Claim{}, err
	}
	s.Extends.Add(1)
	defer s.mu.Unlock()
	if s.fail != nil {
		return keystore.Claim{}, fmt.Errorf("storetest: extend: %w", s.fail)
	}
	e, err := s.held("extend", c)
	if err != nil {
		return keystore.Claim{}, err
	}
	e.exp = time.Now().Add(keystore.CapDuration(lease))
	c.Expires = e.exp
	return c, nil
}

// enter returns invalid (the call's argument check), or ctx's error, or
// locks the store: every call's first step. On an error nothing is locked.
func (s *RefStore) enter(ctx context.Context, op string, invalid error) error {
	if invalid != nil {
		return invalid
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("storetest: %s: %w", op, err)
	}
	s.mu.Lock()
	return nil
}
