package storetest

import (
	"bytes"
	"context"
	"slices"
	"time"

	"github.com/idem-go/idem/keystore"
)

var (
	_ keystore.Inspector = (*RefStore)(nil)
	_ keystore.Forgetter = (*RefStore)(nil)
)

func (e *refEntry) info(key string) keystore.KeyInfo {
	k := keystore.KeyInfo{Key: key, State: keystore.InProgress, Token: e.token, Expires: e.exp, Fingerprint: keystore.HexFingerprint(e.fp)}
	if e.done {
		k.State, k.ResultSize = keystore.Done, len(e.result)
	}
	return k
}

// nowBefore reports whether e has not expired yet.
func nowBefore(e *refEntry) bool { return time.Now().Before(e.exp) }

// Inspect implements [keystore.Inspector].
func (s *RefStore) Inspect(ctx context.Context, key string) (keystore.KeyInfo, error) {
	if err := s.enter(ctx, "inspect", keystore.ValidateInspect(ctx, key)); err != nil {
		return keystore.KeyInfo{}, err
	}
	defer s.mu.Unlock()
	e := s.keys[key]
	if e == nil || e.done && !nowBefore(e) {
		return keystore.KeyInfo{}, keystore.NotFoundError(key)
	}
	k := e.info(key)
	if e.done {
		k.Result = bytes.Clone(e.result)
	}
	return k, nil
}

// List implements [keystore.Inspector], in key order.
func (s *RefStore) List(ctx context.Context, opts keystore.ListOptions) ([]keystore.KeyInfo, string, error) {
	opts, err := keystore.ValidateList(ctx, opts)
	if err != nil {
		return nil, "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.keys))
	for k := range s.keys {
		if k > opts.After {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	var out []keystore.KeyInfo
	for i, k := range names {
		e := s.keys[k]
		if e.done && !nowBefore(e) {
			continue
		}
		info := e.info(k)
		if opts.State != 0 && info.State != opts.State {
			continue
		}
		out = append(out, info)
		if len(out) == opts.Limit {
			if i+1 < len(names) {
				return out, k, nil
			}
			break
		}
	}
	return out, "", nil
}

// Forget implements [keystore.Forgetter].
func (s *RefStore) Forget(ctx context.Context, key string) error {
	if err := s.enter(ctx, "forget", keystore.ValidateInspect(ctx, key)); err != nil {
		return err
	}
	defer s.mu.Unlock()
	e := s.keys[key]
	switch {
	case e == nil || e.done && !nowBefore(e):
		return keystore.NotFoundError(key)
	case !e.done:
		return keystore.ForgetInProgressError(key)
	}
	delete(s.keys, key)
	return nil
}
