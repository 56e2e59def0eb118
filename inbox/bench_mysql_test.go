package inbox_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/sqldialect"
)

// BenchmarkInboxMySQL measures the MySQL key insert: a new key (the insert
// succeeds), a recorded key (it fails with 1062, which the inbox reads as a
// duplicate) and a batch of new keys. Run with
//
//	go test -run '^$' -bench InboxMySQL -benchtime 2s ./inbox
func BenchmarkInboxMySQL(b *testing.B) {
	ctx := context.Background()
	b.Run("Process-1/tx", func(b *testing.B) {
		bd := openBench(b, sqldialect.MySQL)
		for b.Loop() {
			k, id := bd.key()
			if _, err := bd.in.Process(ctx, k, bd.credit(id)); err != nil {
				b.Fatal(err)
			}
		}
		reportRate(b, 1)
	})
	b.Run("Process-duplicate", func(b *testing.B) {
		bd := openBench(b, sqldialect.MySQL)
		if _, err := bd.in.Process(ctx, "dup", bd.credit(1)); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if ok, err := bd.in.Process(ctx, "dup", bd.credit(1)); err != nil || ok {
				b.Fatal(ok, err)
			}
		}
		reportRate(b, 1)
	})
	b.Run("ProcessBatch-100/tx", func(b *testing.B) {
		bd := openBench(b, sqldialect.MySQL)
		msgs := make([]inbox.Message, 100)
		fn := func(ctx context.Context, tx *sql.Tx, m inbox.Message) error {
			_, err := tx.ExecContext(ctx, bd.update, m.Value)
			return err
		}
		for b.Loop() {
			for i := range msgs {
				k, id := bd.key()
				msgs[i] = inbox.Message{Key: k, Value: id}
			}
			if _, err := bd.in.ProcessBatch(ctx, msgs, fn); err != nil {
				b.Fatal(err)
			}
		}
		reportRate(b, 100)
	})
}
