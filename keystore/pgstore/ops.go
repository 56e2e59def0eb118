package pgstore

import (
	"context"
	"time"

	"github.com/idem-go/idem/keystore"
)

var (
	_ keystore.Extender  = (*Store)(nil)
	_ keystore.Inspector = (*Store)(nil)
	_ keystore.Forgetter = (*Store)(nil)
)

// Extend implements [keystore.Extender] with one conditional UPDATE on the
// claim's token: the lease ends lease from now by PostgreSQL's now(). A taken-over,
// released or completed key gets ErrLeaseLost and is not touched. If the
// process dies, renewals stop and the lease ends one lease after the last.
func (s *Store) Extend(ctx context.Context, c keystore.Claim, lease time.Duration) (keystore.Claim, error) {
	return s.s.Extend(ctx, c, lease)
}

// Inspect implements [keystore.Inspector] with one SELECT; it changes
// nothing (a lapsed lease is shown, not taken over).
func (s *Store) Inspect(ctx context.Context, key string) (keystore.KeyInfo, error) {
	return s.s.Inspect(ctx, key)
}

// List implements [keystore.Inspector] with one SELECT in key order, on the
// primary key; the cursor is the last key of the page.
func (s *Store) List(ctx context.Context, opts keystore.ListOptions) ([]keystore.KeyInfo, string, error) {
	return s.s.List(ctx, opts)
}

// Forget implements [keystore.Forgetter] with one conditional DELETE of a
// done key.
func (s *Store) Forget(ctx context.Context, key string) error { return s.s.Forget(ctx, key) }
