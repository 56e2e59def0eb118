package keystore_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/idem-go/idem/internal/testsupport/compactbench"
	"github.com/idem-go/idem/internal/testsupport/dbtest"
	"github.com/idem-go/idem/keystore"
)

// BenchmarkDoNewKey is keystore.Do's cost a new key on memstore (which
// renews leases, so KeepAlive is armed and stopped every call): the
// Watermill path's per-message core (issue 32).
func BenchmarkDoNewKey(b *testing.B) {
	s := dbtest.MemStore(b)
	ctx := context.Background()
	fp := []byte("fp")
	effect := func(context.Context) ([]byte, error) { return []byte("ok"), nil }
	b.ReportAllocs()
	cpu := compactbench.CPUTime()
	i := 0
	for b.Loop() {
		i++
		if _, _, err := keystore.Do(ctx, s, "k"+strconv.Itoa(i), fp, effect); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(compactbench.CPUTime()-cpu)/float64(i), "cpu-ns/op")
}
