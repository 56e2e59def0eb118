package idemhttp

import (
	"context"

	"github.com/idem-go/idem/keystore"
)

// storeCall is the context of a store call: not cancelled by the client's
// disconnect (a call cancelled half-way may have committed), bounded by the
// store timeout (keystore.DetachFor: no timer unless the store asks for
// Done). Call end when the call has returned.
func (m *Middleware) storeCall(ctx context.Context) (sctx context.Context, end context.CancelFunc) {
	return keystore.DetachFor(ctx, m.cfg.storeTimeout)
}

// reserve reserves the store key sk for r's request with keystore.Await:
// waiting as WithWait says, or, without a wait, one Reserve under a store
// call context.
func (m *Middleware) reserve(ctx context.Context, sk string, fp []byte) (keystore.Claim, error) {
	return keystore.Await(ctx, m.store, sk, fp, m.cfg.lease, m.wait())
}
