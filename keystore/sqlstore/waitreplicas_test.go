package sqlstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/sqlstore"
	"github.com/idem-go/idem/sqldialect"
)

// An asynchronous standby, replication held back: with WithWaitReplicas a
// write the standby has not confirmed returns ErrNotReplicated (a Reserve
// gives its lease back at once), and the same calls succeed once the
// standby has them.
func TestWaitReplicasHeld(t *testing.T) {
	t.Parallel()
	h := testenv.StartPGHA(t, testenv.PGAsync)
	ctx := context.Background()
	db := testenv.Open(t, "pgx", h.URL())
	if _, err := sqlstore.New(db, sqldialect.SQLite, sqlstore.WithWaitReplicas(1, time.Second)); err == nil {
		t.Error("WithWaitReplicas accepted on SQLite")
	}
	// s waits long enough for a standby that replicates, on a loaded
	// machine too (300 ms was not, at load 15); held waits 300 ms, for
	// the calls made while replication is held, which must fail.
	s, err := sqlstore.New(db, sqldialect.Postgres, sqlstore.WithWaitReplicas(1, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	held, err := sqlstore.New(db, sqldialect.Postgres, sqlstore.WithWaitReplicas(1, 300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := s.Reserve(ctx, "k", nil, time.Minute)
	if err != nil || c.State != keystore.Acquired {
		t.Fatalf("Reserve, replicating: %+v, %v", c, err)
	}
	h.HoldReplication()
	if err := held.Complete(ctx, c, []byte("r"), time.Hour); !errors.Is(err, sqldialect.ErrNotReplicated) {
		t.Fatalf("Complete with replication held: %v; want ErrNotReplicated", err)
	}
	if _, err := held.Reserve(ctx, "other", nil, time.Minute); !errors.Is(err, sqldialect.ErrNotReplicated) {
		t.Fatalf("Reserve with replication held: %v; want ErrNotReplicated", err)
	}
	// A Reserve of the completed key finds it done, on the primary alone:
	// not an answer to act on either.
	if _, err := held.Reserve(ctx, "k", nil, time.Minute); !errors.Is(err, sqldialect.ErrNotReplicated) {
		t.Fatalf("Reserve of a key done on the primary alone: %v; want ErrNotReplicated", err)
	}
	h.ResumeReplication()
	if err := s.Complete(ctx, c, []byte("r"), time.Hour); err != nil {
		t.Fatalf("Complete again after resuming: %v", err)
	}
	// synchronous_commit=off: COMMIT returns before its flush, so there is
	// no position to wait for; every wait fails, naming the setting.
	off := testenv.Open(t, "pgx", h.URL()+"&synchronous_commit=off")
	so, err := sqlstore.New(off, sqldialect.Postgres, sqlstore.WithWaitReplicas(1, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := so.Reserve(ctx, "off", nil, time.Minute); !errors.Is(err, sqldialect.ErrNotReplicated) || !strings.Contains(err.Error(), "synchronous_commit=off") {
		t.Errorf("Reserve with synchronous_commit=off: %v; want ErrNotReplicated naming the setting", err)
	}
	if _, err := s.Inspect(ctx, "other"); !errors.Is(err, keystore.ErrNotFound) {
		t.Errorf("the unreplicated Reserve's lease: Inspect = %v, want released (ErrNotFound)", err)
	}
	if c, err := s.Reserve(ctx, "other", nil, time.Minute); err != nil || c.State != keystore.Acquired {
		t.Errorf("Reserve again after resuming: %+v, %v; want acquired", c, err)
	}
}
