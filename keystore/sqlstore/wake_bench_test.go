package sqlstore_test

import (
	"testing"

	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/sqlstore"
	"github.com/idem-go/idem/keystore/sqlstore/pglisten"
	"github.com/idem-go/idem/keystore/storetest"
	"github.com/idem-go/idem/sqldialect"
)

// BenchmarkWake is storetest.BenchmarkWake on PostgreSQL with a listener,
// on a pool that keeps up to 32 idle connections.
//
//	go test -run '^$' -bench BenchmarkWake -benchtime 100x ./keystore/sqlstore/
func BenchmarkWake(b *testing.B) {
	storetest.BenchmarkWake(b, func(b *testing.B) keystore.Store {
		db := testenv.Postgres(b)
		// A service's pool keeps its connections: database/sql's default of
		// two idle ones would make most woken waiters open a connection.
		db.SetMaxIdleConns(32)
		l, err := pglisten.New(db)
		if err != nil {
			b.Fatal(err)
		}
		return newStore(b, db, sqldialect.Postgres, sqlstore.WithListener(l))
	})
}
