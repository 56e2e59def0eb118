package testenv_test

import (
	"testing"

	"github.com/idem-go/idem/internal/testsupport/testenv"
)

// A row written through one node is read through the others (Galera
// certifies and applies before COMMIT returns; wsrep_sync_wait makes the
// read wait for what the cluster committed).
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
		conn := g.DB(i)
		var n int
		if err := conn.QueryRow(`SELECT /* wsrep_sync_wait */ count(*) FROM t`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Fatalf("node %d sees %d rows, want 1", i, n)
		}
	}
}
