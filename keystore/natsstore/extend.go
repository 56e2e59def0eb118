package natsstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idem-go/idem/keystore"
)

var _ keystore.Extender = (*Store)(nil)

// Extend implements [keystore.Extender]: a read of the key from the stream
// leader and one publish of the renewed lease, fenced on the key's current
// revision, with the claim's token kept in the record (a claim's token does
// not change while it is held). The lease ends lease from the renewal by
// the server's clock (the message's timestamp); the returned Expires is
// the holder's estimate, as Reserve's. A key that was taken over, released,
// completed or swept gets ErrLeaseLost and is not touched; a lapsed lease
// nobody took over is renewed, as Complete would complete it.
//
// Crash: a renewal that did not land leaves the old lease to expire. If its
// ack is lost, the publish is sent again with the same message id and
// deduplicated by the server.
func (s *Store) Extend(ctx context.Context, c keystore.Claim, lease time.Duration) (keystore.Claim, error) {
	dctx, cancel, err := begin(ctx, "extend", keystore.ValidateExtend(c, lease))
	if err != nil {
		return keystore.Claim{}, err
	}
	defer cancel()
	lease, ttl := leaseTTL(lease)
	subject := s.Subject(c.Key)
	id := callID("e")
	for range 4 {
		st, ok, err := s.get(dctx, subject)
		if err != nil {
			return keystore.Claim{}, fmt.Errorf("natsstore: extend: %w", err)
		}
		if !ok || !st.heldBy(c.Token) {
			return keystore.Claim{}, keystore.LeaseLostError("extend", c.Key, c.Token)
		}
		end := time.UnixMicro(time.Now().Add(lease).UnixMicro())
		_, err = s.publish(dctx, subject, encodeRenewed(c.Token, lease, end, st.rec.fp, st.rec.nonce), st.seq, ttl, id, nil)
		if err == nil {
			c.Expires = end
			return c, nil
		}
		if !errors.Is(err, errConflict) {
			return keystore.Claim{}, fmt.Errorf("natsstore: extend: %w", err)
		}
		// Another write landed between the read and the publish (or this
		// call's own first try, whose ack was lost): read again.
	}
	return keystore.Claim{}, fmt.Errorf("natsstore: extend %q: the key kept changing under 4 attempts", c.Key)
}
