package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/sqlstore"
	"github.com/idem-go/idem/keystore/storetest"
	"github.com/idem-go/idem/sqldialect"
)

// TestPeek: Peek answers a done key as Reserve does, from a read, and
// declines everything else (absent, in progress, a conflicting
// fingerprint), for Reserve to answer.
func TestPeek(t *testing.T) {
	eachDialect(t, func(t *testing.T, d sqldialect.Dialect, db *sql.DB) {
		for _, layout := range []sqlstore.Layout{sqlstore.LayoutRows, sqlstore.LayoutDigest} {
			t.Run(layout.String(), func(t *testing.T) {
				table := "peek_" + layout.String()
				if layout == sqlstore.LayoutRows {
					oldTable(t, db, d, table)
				}
				s := newStore(t, db, d, sqlstore.WithTable(table))
				wantLayout(t, s, layout)
				ctx := context.Background()
				fp := []byte("fp-a")
				if _, ok := s.Peek(ctx, "k", fp); ok {
					t.Fatal("Peek of an absent key answered")
				}
				c, err := s.Reserve(ctx, "k", fp, time.Hour)
				if err != nil || c.State != keystore.Acquired {
					t.Fatalf("Reserve: %+v %v", c, err)
				}
				if _, ok := s.Peek(ctx, "k", fp); ok {
					t.Fatal("Peek of a key in progress answered")
				}
				if err := s.Complete(ctx, c, []byte("r"), time.Hour); err != nil {
					t.Fatal(err)
				}
				p, ok := s.Peek(ctx, "k", fp)
				if !ok {
					t.Fatal("Peek of a done key declined")
				}
				r, err := s.Reserve(ctx, "k", fp, time.Hour)
				if err != nil {
					t.Fatal(err)
				}
				if p.Key != r.Key || p.State != r.State || string(p.Result) != string(r.Result) || !p.Expires.Equal(r.Expires) || p.Token != r.Token {
					t.Fatalf("Peek %+v, Reserve %+v: want the same claim", p, r)
				}
				if p, ok := s.Peek(ctx, "k", nil); !ok || string(p.Result) != "r" {
					t.Fatalf("Peek without a fingerprint: %+v %v", p, ok)
				}
				if _, ok := s.Peek(ctx, "k", []byte("fp-b")); ok {
					t.Fatal("Peek with a conflicting fingerprint answered")
				}
				if _, err := s.Reserve(ctx, "k", []byte("fp-b"), time.Hour); !errors.Is(err, idem.ErrFingerprintMismatch) {
					t.Fatalf("Reserve with a conflicting fingerprint: %v", err)
				}
				// An empty result comes back empty, not nil, as from Reserve.
				c, err = s.Reserve(ctx, "empty", nil, time.Hour)
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Complete(ctx, c, nil, time.Hour); err != nil {
					t.Fatal(err)
				}
				if p, ok := s.Peek(ctx, "empty", nil); !ok || p.Result == nil || len(p.Result) != 0 {
					t.Fatalf("Peek of an empty result: %+v %v", p, ok)
				}
				if _, ok := s.Peek(ctx, "", nil); ok {
					t.Fatal("Peek of an invalid key answered")
				}
			})
		}
	})
}

// A store that checks replication declines to peek: Await then reserves,
// and its Reserve answers as before.
func TestPeekDeclinedWithReplicationCheck(t *testing.T) {
	eachDialect(t, func(t *testing.T, d sqldialect.Dialect, db *sql.DB) {
		s := newStore(t, db, d, sqlstore.WithTable("peek_checked"), sqlstore.WithReplicationCheck(func(sqldialect.Replication) {}))
		ctx := context.Background()
		c, err := s.Reserve(ctx, "k", nil, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Complete(ctx, c, []byte("r"), time.Hour); err != nil {
			t.Fatal(err)
		}
		if _, ok := s.Peek(ctx, "k", nil); ok {
			t.Fatal("a store WithReplicationCheck peeked")
		}
	})
}

// TestWokenWaitersPeek: sixteen waiters on one PostgreSQL key, asleep on
// the listener's notification, are answered by Peek after the Complete:
// no Reserve (no advisory lock, no commit) follows it.
func TestWokenWaitersPeek(t *testing.T) {
	st := listening(t)
	s := &storetest.Counted{Store: st}
	ctx := context.Background()
	holder, err := st.Reserve(ctx, "k", nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 16
	var answers []<-chan error
	for range waiters {
		answers = append(answers, storetest.AwaitResult(ctx, s, "k", "r"))
	}
	// Each waiter reserves, subscribes, peeks, reserves again and sleeps.
	testenv.WaitFor(t, time.Minute, "the waiters asleep", func() bool { return s.Reserves() >= 2*waiters })
	if err := st.Complete(ctx, holder, []byte("r"), time.Hour); err != nil {
		t.Fatal(err)
	}
	for _, a := range answers {
		if err := <-a; err != nil {
			t.Fatal(err)
		}
	}
	if n := s.Reserves(); n != 2*waiters {
		t.Fatalf("%d Reserves, want %d: a woken waiter reserved instead of peeking", n, 2*waiters)
	}
}
