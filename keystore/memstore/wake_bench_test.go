package memstore_test

import (
	"testing"

	"github.com/idem-go/idem/internal/testsupport/dbtest"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/storetest"
)

// go test -run '^$' -bench BenchmarkWake -benchtime 100x ./keystore/memstore/
func BenchmarkWake(b *testing.B) {
	storetest.BenchmarkWake(b, func(b *testing.B) keystore.Store { return dbtest.MemStore(b) })
}
