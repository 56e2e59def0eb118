package keystore_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idem-go/idem/keystore"
)

// keepAliveOnce reserves a key in s, keeps its lease alive across two
// renewals and stops.
func keepAliveOnce(t *testing.T, s keystore.Store, key string) {
	t.Helper()
	ctx := context.Background()
	c, err := s.Reserve(ctx, key, nil, time.Second)
	if err != nil || c.State != keystore.Acquired {
		t.Fatalf("reserve: %+v, %v", c, err)
	}
	kctx, stop := keystore.KeepAlive(ctx, s, c, time.Second)
	time.Sleep(2 * time.Second) // two renewals (fake time inside a bubble)
	if err := context.Cause(kctx); err != nil {
		t.Fatalf("lease lost: %v", err)
	}
	last, err := stop()
	if err != nil || !last.Expires.After(c.Expires) {
		t.Fatalf("stop: %+v, %v; want a renewed lease", last, err)
	}
}

// KeepAlive works inside testing/synctest bubbles, one after another and
// between them outside any: a user tests a handler under fake time. A
// timer belongs to the bubble that made it, so renewals must not share a
// timer across calls (a shared schedule of first renewals, tried in
// issue 32, stopped the process with "reset of synctest timer from
// outside bubble").
func TestKeepAliveInSynctestBubbles(t *testing.T) {
	s := newLeaseStore()
	for i, key := range []string{"a", "b"} {
		synctest.Test(t, func(t *testing.T) { keepAliveOnce(t, s, key) })
		if i == 0 {
			c, err := s.Reserve(context.Background(), "outside", nil, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			_, stop := keystore.KeepAlive(context.Background(), s, c, time.Minute)
			stop()
		}
	}
}
