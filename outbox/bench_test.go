package outbox_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/outbox"
	"github.com/idem-go/idem/sqldialect"
)

// BenchmarkRelay measures messages/s from committed outbox rows to a
// publisher that acknowledges at once, on PostgreSQL (fsync on), with 1 and
// 4 relays, beside a plain loop that calls the same publisher with the same
// batches and no database. The gap is the relay's claim + mark transaction.
//
//	go test -run '^$' -bench Relay -benchtime 20000x ./outbox
func BenchmarkRelay(b *testing.B) {
	var sink atomic.Int64
	pub := outbox.PublisherFunc(func(ctx context.Context, msgs []outbox.Message) error {
		sink.Add(int64(len(msgs)))
		return nil
	})
	b.Run("plain-publisher-loop", func(b *testing.B) {
		batch := make([]outbox.Message, 100)
		for i := 0; i < b.N; i += len(batch) {
			_ = pub.Publish(context.Background(), batch[:min(len(batch), b.N-i)])
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msg/s")
	})
	for _, relays := range []int{1, 4} {
		b.Run(fmt.Sprintf("postgres-%d-relays", relays), func(b *testing.B) {
			db := testenv.Postgres(b)
			o, _ := outbox.New(sqldialect.Postgres)
			ctx := context.Background()
			if err := o.Migrate(ctx, db); err != nil {
				b.Fatal(err)
			}
			// Committed before the clock starts: 100 messages per transaction.
			for i := 0; i < b.N; i += 100 {
				tx, _ := db.BeginTx(ctx, nil)
				for j := i; j < min(i+100, b.N); j++ {
					if _, err := o.Add(ctx, tx, outbox.Message{Topic: "t", OrderingKey: fmt.Sprint("k", j%1000), Payload: []byte("{}")}); err != nil {
						b.Fatal(err)
					}
				}
				if err := tx.Commit(); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			sink.Store(0)
			rctx, cancel := context.WithCancel(ctx)
			var wg sync.WaitGroup
			for range relays {
				r, _ := outbox.NewRelay(db, o, pub, outbox.WithBatch(100), outbox.WithPoll(time.Millisecond))
				wg.Add(1)
				go func() { defer wg.Done(); _ = r.Run(rctx) }()
			}
			for sink.Load() < int64(b.N) {
				time.Sleep(time.Millisecond)
			}
			b.StopTimer()
			cancel()
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msg/s")
		})
	}
}
