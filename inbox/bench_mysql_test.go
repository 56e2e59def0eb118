package inbox_test

import (
	"context"
	"testing"

	"github.com/idem-go/idem/sqldialect"
)

// BenchmarkInboxMySQL measures the MySQL key insert: a new key (the insert
// succeeds), a recorded key (it fails with 1062, which the inbox reads as a
// duplicate) and a batch of new keys. Run with
//
//	go test -run '^$' -bench InboxMySQL -benchtime 2s ./inbox
func BenchmarkInboxMySQL(b *testing.B) {
	b.Run("Process-1/tx", func(b *testing.B) { benchProcess(b, sqldialect.MySQL) })
	b.Run("Process-duplicate", func(b *testing.B) {
		bd := openBench(b, sqldialect.MySQL)
		ctx := context.Background()
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
	b.Run("ProcessBatch-100/tx", func(b *testing.B) { benchProcessBatch(b, sqldialect.MySQL) })
}
