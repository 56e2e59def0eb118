package testenv_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/testsupport/testenv"
)

// A commit made while replication is held is on the old primary only: after
// kill -9 and promotion the new primary does not have it (PGAsync), and a
// client on the multi-host URL reaches the new primary.
func TestPGHALosesHeldCommit(t *testing.T) {
	t.Parallel()
	h := testenv.StartPGHA(t, testenv.PGAsync)
	db := testenv.Open(t, "pgx", h.URL())
	for _, q := range []string{`CREATE TABLE t (id int PRIMARY KEY)`, `INSERT INTO t VALUES (1)`} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	if err := h.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
	h.HoldReplication()
	if _, err := db.Exec(`INSERT INTO t VALUES (2)`); err != nil {
		t.Fatal(err)
	}
	h.KillPrimary()
	h.Promote()
	ids := rows(t, db, `SELECT id FROM t ORDER BY id`)
	if len(ids) != 1 || ids[0] != 1 {
		t.Fatalf("after the failover the table holds %v, want [1] (the held commit lost)", ids)
	}
	if _, err := db.Exec(`INSERT INTO t VALUES (3)`); err != nil {
		t.Fatalf("write on the new primary: %v", err)
	}
}

// In PGSync a commit waits while replication is held and returns once it
// is released.
func TestPGHASyncWaits(t *testing.T) {
	t.Parallel()
	h := testenv.StartPGHA(t, testenv.PGSync)
	db := testenv.Open(t, "pgx", h.URL())
	if _, err := db.Exec(`CREATE TABLE t (id int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	h.HoldReplication()
	done := make(chan error, 1)
	go func() {
		_, err := db.Exec(`INSERT INTO t VALUES (1)`)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("commit returned (%v) while replication was held", err)
	case <-time.After(300 * time.Millisecond):
	}
	h.ResumeReplication()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func rows(t *testing.T, db *sql.DB, q string) []int {
	t.Helper()
	var out []int
	err := testenv.Poll(30*time.Second, 50*time.Millisecond, func() error {
		out = out[:0]
		r, err := db.Query(q)
		if err != nil {
			return err
		}
		defer r.Close()
		for r.Next() {
			var v int
			if err := r.Scan(&v); err != nil {
				return err
			}
			out = append(out, v)
		}
		return r.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
