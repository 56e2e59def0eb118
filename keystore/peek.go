package keystore

import (
	"context"
	"time"
)

// Peeker is implemented by stores that can answer a Reserve of a done key
// by reading alone, where their Reserve writes (PostgreSQL's takes a lock
// and commits, and so flushes its log). [Await] peeks before it reserves
// again after a pause, so that waiters woken by a completion read the
// stored result side by side instead of queueing on the key's lock.
//
// Peek returns ok and the [Claim] that Reserve would return (State Done,
// the stored result, Expires) when the key is done, its result has not
// expired and its stored fingerprint does not conflict with fp. In every
// other case (absent, in progress, lapsed, a conflicting fingerprint, an
// error, or a store that cannot answer by reading alone as configured) ok
// is false and the caller reserves, which gives the answer Reserve gives.
// Peek changes nothing and takes no lease. A store implements it only
// where a done key it reads cannot be undone by a failover that Reserve
// would have waited out (a store that waits for replicas declines).
type Peeker interface {
	Peek(ctx context.Context, key string, fp []byte) (c Claim, ok bool)
}

// Peek calls s's [Peeker]; ok is false when s has none.
func Peek(ctx context.Context, s Store, key string, fp []byte) (Claim, bool) {
	if p, ok := s.(Peeker); ok {
		return p.Peek(ctx, key, fp)
	}
	return Claim{}, false
}

// peekDetached calls p.Peek under detachCall(ctx, timeout).
func peekDetached(ctx context.Context, p Peeker, key string, fp []byte, timeout time.Duration) (Claim, bool) {
	dctx := detachCall(ctx, timeout)
	defer dctx.end()
	return p.Peek(dctx, key, fp)
}
