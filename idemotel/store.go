package idemotel

import (
	"context"
	"errors"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/keystore"
)

// The outcomes of the key store spans (idem.outcome). Reserve ends with
// the claim's state ("reserved": this caller holds the key; "in_progress":
// another holds it; "done": its stored result will be replayed) or with
// "mismatch" (the key is recorded for another fingerprint); Complete,
// Release and Extend end with "completed", "released" or "extended", or
// "lease_lost" (the claim's token is no longer current: another caller may
// repeat the effect). Any call ends with "error" when the store or its
// input failed.
const (
	OutcomeReserved   = "reserved"
	OutcomeInProgress = "in_progress"
	OutcomeDone       = "done"
	OutcomeMismatch   = "mismatch"
	OutcomeCompleted  = "completed"
	OutcomeReleased   = "released"
	OutcomeExtended   = "extended"
	OutcomeLeaseLost  = "lease_lost"
	OutcomeError      = "error"
)

// WrapStore returns s with Reserve, Complete, Release and Extend traced
// through t: one span each (idem.OpKeystore*, client kind), a child of the
// span in the call's context, with the key's hash, the scope
// (idem.scope, for a view returned by Scope), idem.takeover on a Reserve
// that replaced an expired lease, and the outcome. The wrapper changes no
// behaviour: it has every optional interface of package keystore
// (Extender, Scoper, Sweeper, Inspector, Forgetter, Notifier, Peeker) and
// forwards each to s, failing with errors.ErrUnsupported where s lacks it
// (Peek answers not ok); keystore.As and keystore.CanExtend look through
// its Unwrap method, so keystore.Do and KeepAlive (and keystore.Await, for
// notifications and peeks) see what s can do. Scoped views are wrapped
// too. Sweep, Inspect, List, Forget, Notify and Peek are not traced: they are an operator's, a janitor's or a waiter's, not
// traffic.
//
// A nil t returns s itself; a nil s returns nil.
func WrapStore(s keystore.Store, t idem.Tracer) keystore.Store {
	if s == nil || t == nil {
		return s
	}
	return &store{inner: s, t: t}
}

type store struct {
	inner keystore.Store
	t     idem.Tracer
	scope string
}

func (s *store) start(ctx context.Context, op, key string) (context.Context, idem.Span) {
	ctx, sp := s.t.Start(ctx, op)
	sp.Key(key)
	if s.scope != "" {
		sp.Attr(idem.AttrScope, s.scope)
	}
	return ctx, sp
}

// Unwrap returns the wrapped store.
func (s *store) Unwrap() keystore.Store { return s.inner }

func (s *store) Reserve(ctx context.Context, key string, fp []byte, lease time.Duration) (keystore.Claim, error) {
	ctx, sp := s.start(ctx, idem.OpKeystoreReserve, key)
	c, err := s.inner.Reserve(ctx, key, fp, lease)
	switch {
	case errors.Is(err, idem.ErrFingerprintMismatch):
		sp.End(OutcomeMismatch, nil) // the store did its job: the caller reused a key
	case err != nil:
		sp.End(OutcomeError, err)
	case c.State == keystore.Acquired:
		if c.Takeover {
			sp.Attr(idem.AttrTakeover, true)
		}
		sp.End(OutcomeReserved, nil)
	case c.State == keystore.InProgress:
		sp.End(OutcomeInProgress, nil)
	default:
		sp.End(OutcomeDone, nil)
	}
	return c, err
}

func (s *store) Complete(ctx context.Context, c keystore.Claim, result []byte, ttl time.Duration) error {
	ctx, sp := s.start(ctx, idem.OpKeystoreComplete, c.Key)
	err := s.inner.Complete(ctx, c, result, ttl)
	end(sp, OutcomeCompleted, err)
	return err
}

func (s *store) Release(ctx context.Context, c keystore.Claim) error {
	ctx, sp := s.start(ctx, idem.OpKeystoreRelease, c.Key)
	err := s.inner.Release(ctx, c)
	end(sp, OutcomeReleased, err)
	return err
}

func (s *store) Extend(ctx context.Context, c keystore.Claim, lease time.Duration) (keystore.Claim, error) {
	if !keystore.CanExtend(s.inner) {
		return keystore.Extend(ctx, s.inner, c, lease) // unsupported: not a traced call
	}
	ctx, sp := s.start(ctx, idem.OpKeystoreExtend, c.Key)
	nc, err := keystore.Extend(ctx, s.inner, c, lease)
	end(sp, OutcomeExtended, err)
	return nc, err
}

// end ends the span of a fenced call: ok, lease_lost or error. A lost
// lease is recorded as a failure: the holder must stop, and the effect may
// run again.
func end(sp idem.Span, ok string, err error) {
	switch {
	case err == nil:
		sp.End(ok, nil)
	case errors.Is(err, keystore.ErrLeaseLost):
		sp.End(OutcomeLeaseLost, err)
	default:
		sp.End(OutcomeError, err)
	}
}

func (s *store) Scope(name string) (keystore.Store, error) {
	v, err := keystore.Scope(s.inner, name)
	if err != nil {
		return nil, err
	}
	return &store{inner: v, t: s.t, scope: name}, nil
}

func (s *store) Sweep(ctx context.Context, batch int) (int, error) {
	return keystore.Sweep(ctx, s.inner, batch)
}

func (s *store) Inspect(ctx context.Context, key string) (keystore.KeyInfo, error) {
	return keystore.Inspect(ctx, s.inner, key)
}

func (s *store) List(ctx context.Context, opts keystore.ListOptions) ([]keystore.KeyInfo, string, error) {
	return keystore.List(ctx, s.inner, opts)
}

func (s *store) Forget(ctx context.Context, key string) error {
	return keystore.Forget(ctx, s.inner, key)
}

func (s *store) Notify(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	return keystore.Notify(ctx, s.inner, key)
}

// Peek calls the wrapped store's Peek (see [keystore.Peeker]); ok is false
// when it has none, and keystore.Await then reserves. Peeks are not
// counted as Reserves.
func (s *store) Peek(ctx context.Context, key string, fp []byte) (keystore.Claim, bool) {
	return keystore.Peek(ctx, s.inner, key, fp)
}
