package consume

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/idem-go/idem/adapters/internal/consume/settest"
	"github.com/idem-go/idem/inbox"
)

// BenchmarkProcess measures what the core adds to the inbox: the same
// batches of 500 keys through Inbox.Process (key function, checks,
// decisions, typed set handler) and straight through
// inbox.ProcessBatchSet, alternating, on two fresh SQLite inboxes.
//
//	go test -run '^$' -bench Process -benchtime 40x ./adapters/internal/consume/
func BenchmarkProcess(b *testing.B) {
	const batch = 500
	set := func(ctx context.Context, tx *sql.Tx, ms []msg) error {
		return settest.Insert(ctx, tx, "INSERT INTO effects", ms, func(m msg) []any { return []any{m.id, m.body} })
	}
	core := newFake(b, nil, WithSetHandler(set))
	direct := newFake(b, nil, WithSetHandler(set))
	raw := func(ctx context.Context, tx *sql.Tx, fresh []inbox.Message) error {
		return settest.Insert(ctx, tx, "INSERT INTO effects", fresh, func(m inbox.Message) []any { return []any{m.Key, ""} })
	}
	var viaCore, viaInbox time.Duration
	i := 0
	for b.Loop() {
		ds := make([]Delivery[msg], batch)
		ms := make([]inbox.Message, batch)
		for j := range ds {
			k := fmt.Sprintf("k-%09d", i*batch+j)
			ds[j] = Delivery[msg]{Msg: msg{id: k}, Attempt: 1}
			ms[j] = inbox.Message{Key: k}
		}
		i++
		t0 := time.Now()
		if _, err := core.core.Process(context.Background(), ds); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := direct.in.ProcessBatchSet(context.Background(), ms, raw, nil); err != nil {
			b.Fatal(err)
		}
		viaCore += t1.Sub(t0)
		viaInbox += time.Since(t1)
	}
	n := float64(b.N * batch)
	b.ReportMetric(n/viaCore.Seconds(), "core-records/s")
	b.ReportMetric(n/viaInbox.Seconds(), "inbox-records/s")
	b.ReportMetric(viaInbox.Seconds()/viaCore.Seconds(), "core/inbox")
}
