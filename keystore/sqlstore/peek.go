package sqlstore

import (
	"context"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/keystore"
)

var _ keystore.Peeker = (*Store)(nil)

// Peek implements [keystore.Peeker] with one SELECT of the key's live row,
// outside any transaction: no advisory lock, no commit. On PostgreSQL that
// is what lets the waiters that one completion wakes read the result side
// by side, where each Reserve would queue on the key's lock and flush a
// commit. A store made WithWaitReplicas or WithReplicationCheck declines
// (ok false, and keystore.Await reserves): its Reserve answers a done key
// only once a commit of its own has reached the standbys, after the
// completion, and a read alone could hand out a result that a failover
// then loses.
func (s *Store) Peek(ctx context.Context, key string, fp []byte) (keystore.Claim, bool) {
	if s.wait.Standbys > 0 || s.replication != nil {
		return keystore.Claim{}, false
	}
	if keystore.ValidateReserve(key, fp, time.Second) != nil || ctx.Err() != nil {
		return keystore.Claim{}, false
	}
	if len(fp) == 0 {
		fp = nil
	}
	l, err := s.current(ctx)
	if err != nil {
		return keystore.Claim{}, false
	}
	var r row
	err = runner{s: s}.queryRow(ctx, l.q.lookup, s.keyArgs(l, key),
		&r.state, &r.token, &r.takeovers, &r.fp, &r.res, &r.expires, &r.same)
	if err != nil || !r.same || r.state.Int16 != stDone || idem.FingerprintsConflict(r.fp, fp) {
		return keystore.Claim{}, false // absent, another key's, in progress, a conflict or an error: Reserve answers
	}
	c := keystore.Claim{Key: key, State: keystore.Done, Result: r.res, Expires: time.UnixMicro(r.expires.Int64)}
	if c.Result == nil {
		c.Result = []byte{}
	}
	return c, true
}
