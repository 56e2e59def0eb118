package testenv_test

import (
	"testing"

	"github.com/idem-go/idem/internal/testsupport/testenv"
)

// A row written through one node is read through the others. Galera
// certifies a write set on every node before COMMIT returns but applies it
// on the others afterwards, so a read there can come before the apply;
// SyncedDB's wsrep_sync_wait=1 makes the read wait until the node has
// applied what the cluster had committed.
func TestGaleraReplicates(t *testing.T) {
	t.Parallel()
	g := testenv.StartGalera(t)
	db0 := g.DB(0)
	for _, q := range []string{`CREATE TABLE t (id int PRIMARY KEY) ENGINE=InnoDB`, `INSERT INTO t VALUES (1)`} {
		if _, err := db0.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i < testenv.GaleraNodes; i++ {
		conn := g.SyncedDB(i)
		var n, wait int
		if err := conn.QueryRow(`SELECT @@wsrep_sync_wait, count(*) FROM t`).Scan(&wait, &n); err != nil {
			t.Fatal(err)
		}
		if wait != 1 {
			t.Fatalf("node %d: wsrep_sync_wait = %d, want 1 (SyncedDB's parameter was not applied)", i, wait)
		}
		if n != 1 {
			t.Fatalf("node %d sees %d rows, want 1", i, n)
		}
	}
}
