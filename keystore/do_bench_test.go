package keystore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

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

// nopExtender renews every lease at once, for benchmarks of the renewal's
// own cost.
type nopExtender struct{}

func (nopExtender) Extend(_ context.Context, c keystore.Claim, _ time.Duration) (keystore.Claim, error) {
	return c, nil
}

// BenchmarkRenewalShortEffect is the renewal's cost to an effect that
// returns before its first renewal is due (nearly every HTTP handler):
// Start and Stop, serial and from every core at once.
func BenchmarkRenewalShortEffect(b *testing.B) {
	c := keystore.Claim{Key: "k", Token: 1, Expires: time.Now().Add(time.Minute)}
	lost := func(error) {}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var r keystore.Renewal
			r.Start(context.Background(), nopExtender{}, c, time.Minute, lost)
			r.Stop()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				var r keystore.Renewal
				r.Start(context.Background(), nopExtender{}, c, time.Minute, lost)
				r.Stop()
			}
		})
	})
}
