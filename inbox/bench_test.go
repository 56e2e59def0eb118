package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/internal/testsupport/inboxtest"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/sqldialect"
)

// The benchmarks compare the inbox with the same work written by hand with
// database/sql (the raw baseline): BEGIN; INSERT ... ON CONFLICT DO NOTHING;
// UPDATE only if one row was inserted; COMMIT. They report msg/s. Run with
//
//	go test -run '^$' -bench Inbox -benchtime 3s ./inbox
//
// PostgreSQL runs with fsync on. Keys are distinct and increasing. Every
// variant gets a fresh database, so table size and WAL state do not favour
// whichever runs first.

type benchDB struct {
	d      sqldialect.Dialect
	db     *sql.DB
	in     *inbox.Inbox
	insert string // raw baseline's key insert
	update string // raw baseline's effect
	keys   atomic.Int64
}

const benchWallets = 64

func openBench(b *testing.B, d sqldialect.Dialect) *benchDB {
	b.Helper()
	var db *sql.DB
	switch d {
	case sqldialect.SQLite:
		db = testenv.SQLite(b)
	case sqldialect.Postgres:
		db = testenv.Postgres(b)
	case sqldialect.MySQL:
		db = testenv.MySQL(b)
	}
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(16)
	in := inboxtest.Migrated(b, db, d, "bench")
	// The raw baseline gets its own key table of the same shape.
	inboxtest.Migrated(b, db, d, "bench", inbox.WithTable("raw_keys"), inbox.WithLayout(inbox.LayoutRows))
	if _, err := db.Exec("CREATE TABLE wallet (id INT PRIMARY KEY, balance BIGINT NOT NULL)"); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < benchWallets; i++ {
		if _, err := db.Exec("INSERT INTO wallet (id, balance) VALUES (" + strconv.Itoa(i) + ", 0)"); err != nil {
			b.Fatal(err)
		}
	}
	p := d.Placeholder
	now := "now()"
	if d == sqldialect.SQLite {
		now = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)"
	}
	return &benchDB{
		d: d, db: db, in: in,
		insert: "INSERT INTO raw_keys (consumer, idem_key, fingerprint, processed_at) VALUES (" + p(1) + ", " + p(2) + ", NULL, " + now + ") ON CONFLICT DO NOTHING",
		update: "UPDATE wallet SET balance = balance + 1 WHERE id = " + p(1),
	}
}

func (bd *benchDB) key() (string, int) {
	n := bd.keys.Add(1)
	return fmt.Sprintf("evt-%012d", n), int(n % benchWallets)
}

func (bd *benchDB) credit(id int) inbox.Handler {
	return func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, bd.update, id)
		return err
	}
}

// raw is the hand-written baseline for one message.
func (bd *benchDB) raw(ctx context.Context, key string, id int) error {
	tx, err := bd.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, bd.insert, "bench", key)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 1 {
		if _, err := tx.ExecContext(ctx, bd.update, id); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// creditMany adds one to the balance of each wallet in ids (a wallet named
// twice gets two) with one statement.
func (bd *benchDB) creditMany(ctx context.Context, tx *sql.Tx, ids []int) error {
	n := map[int]int{}
	for _, id := range ids {
		n[id]++
	}
	var q strings.Builder
	if bd.d == sqldialect.MySQL {
		// No UPDATE … FROM: a join with a derived table of the counts.
		args := make([]any, 0, 2*len(n))
		for id, c := range n {
			if len(args) > 0 {
				q.WriteString(" UNION ALL ")
			}
			q.WriteString("SELECT ? AS id, ? AS n")
			args = append(args, id, c)
		}
		_, err := tx.ExecContext(ctx, "UPDATE wallet JOIN ("+q.String()+") v ON wallet.id = v.id SET wallet.balance = wallet.balance + v.n", args...)
		return err
	}
	q.WriteString("WITH v(id, n) AS (VALUES ")
	args := make([]any, 0, 2*len(n))
	for id, c := range n {
		if len(args) > 0 {
			q.WriteString(", ")
		}
		fmt.Fprintf(&q, "(CAST(%s AS INTEGER), CAST(%s AS BIGINT))", bd.d.Placeholder(len(args)+1), bd.d.Placeholder(len(args)+2))
		args = append(args, id, c)
	}
	q.WriteString(") UPDATE wallet SET balance = balance + v.n FROM v WHERE wallet.id = v.id")
	_, err := tx.ExecContext(ctx, q.String(), args...)
	return err
}

// rawBatch is the hand-written baseline for a batch: the keys in one
// multi-row insert, the effects of the new ones in one UPDATE.
func (bd *benchDB) rawBatch(ctx context.Context, keys []string, ids []int) error {
	tx, err := bd.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	now := "now()"
	if bd.d == sqldialect.SQLite {
		now = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)"
	}
	var q strings.Builder
	q.WriteString("INSERT INTO raw_keys (consumer, idem_key, fingerprint, processed_at) VALUES ")
	args := make([]any, 0, len(keys))
	for i, k := range keys {
		if i > 0 {
			q.WriteString(", ")
		}
		fmt.Fprintf(&q, "('bench', %s, NULL, %s)", bd.d.Placeholder(i+1), now)
		args = append(args, k)
	}
	q.WriteString(" ON CONFLICT DO NOTHING RETURNING idem_key")
	rows, err := tx.QueryContext(ctx, q.String(), args...)
	if err != nil {
		return err
	}
	idOf := make(map[string]int, len(keys))
	for i, k := range keys {
		idOf[k] = ids[i]
	}
	var fresh []int
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			rows.Close()
			return err
		}
		fresh = append(fresh, idOf[k])
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(fresh) > 0 {
		if err := bd.creditMany(ctx, tx, fresh); err != nil {
			return err
		}
	}
	return tx.Commit()
}

func reportRate(b *testing.B, perOp int) {
	b.ReportMetric(float64(b.N*perOp)/b.Elapsed().Seconds(), "msg/s")
}

// benchProcess runs Process with a new key per call.
func benchProcess(b *testing.B, d sqldialect.Dialect) {
	bd := openBench(b, d)
	ctx := context.Background()
	for b.Loop() {
		k, id := bd.key()
		if _, err := bd.in.Process(ctx, k, bd.credit(id)); err != nil {
			b.Fatal(err)
		}
	}
	reportRate(b, 1)
}

// benchProcessBatch runs ProcessBatch on batches of 100 new keys.
func benchProcessBatch(b *testing.B, d sqldialect.Dialect) {
	bd := openBench(b, d)
	ctx := context.Background()
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
}

func BenchmarkInbox(b *testing.B) {
	for _, d := range []sqldialect.Dialect{sqldialect.SQLite, sqldialect.Postgres} {
		b.Run(d.String(), func(b *testing.B) {
			ctx := context.Background()
			b.Run("raw-1/tx", func(b *testing.B) {
				bd := openBench(b, d)
				for b.Loop() {
					k, id := bd.key()
					if err := bd.raw(ctx, k, id); err != nil {
						b.Fatal(err)
					}
				}
				reportRate(b, 1)
			})
			b.Run("Process-1/tx", func(b *testing.B) { benchProcess(b, d) })
			b.Run("ProcessBatch-100/tx", func(b *testing.B) { benchProcessBatch(b, d) })
			// The set-based handler: one UPDATE for the batch's new
			// messages, summed per wallet (see ProcessBatchSet).
			b.Run("ProcessBatchSet-100/tx", func(b *testing.B) {
				bd := openBench(b, d)
				msgs := make([]inbox.Message, 100)
				set := func(ctx context.Context, tx *sql.Tx, fresh []inbox.Message) error {
					ids := make([]int, len(fresh))
					for i, m := range fresh {
						ids[i] = m.Value.(int)
					}
					return bd.creditMany(ctx, tx, ids)
				}
				for b.Loop() {
					for i := range msgs {
						k, id := bd.key()
						msgs[i] = inbox.Message{Key: k, Value: id}
					}
					if _, err := bd.in.ProcessBatchSet(ctx, msgs, set, nil); err != nil {
						b.Fatal(err)
					}
				}
				reportRate(b, 100)
			})
			// The same batch written by hand: one multi-row INSERT …
			// ON CONFLICT DO NOTHING RETURNING, one UPDATE for the new rows.
			b.Run("raw-batch-100/tx", func(b *testing.B) {
				bd := openBench(b, d)
				keys := make([]string, 100)
				ids := make([]int, 100)
				for b.Loop() {
					for i := range keys {
						keys[i], ids[i] = bd.key()
					}
					if err := bd.rawBatch(ctx, keys, ids); err != nil {
						b.Fatal(err)
					}
				}
				reportRate(b, 100)
			})
			b.Run("ProcessBatch-100/tx-8clients", func(b *testing.B) {
				bd := openBench(b, d)
				fn := func(ctx context.Context, tx *sql.Tx, m inbox.Message) error {
					_, err := tx.ExecContext(ctx, bd.update, m.Value)
					return err
				}
				var batches atomic.Int64
				b.ResetTimer()
				b.SetParallelism(4)
				b.RunParallel(func(pb *testing.PB) {
					msgs := make([]inbox.Message, 100)
					for pb.Next() {
						for i := range msgs {
							k, _ := bd.key()
							// Each client updates its own wallet: rows
							// locked in one order, no deadlocks.
							msgs[i] = inbox.Message{Key: k, Value: int(batches.Load() % benchWallets)}
						}
						batches.Add(1)
						if _, err := bd.in.ProcessBatch(ctx, msgs, fn); err != nil {
							b.Error(err)
							return
						}
					}
				})
				reportRate(b, 100)
			})
			// Eight concurrent consumers, as the anchors' pgbench runs had:
			// the raw insert and Process, one key per transaction.
			for _, op := range []struct {
				name string
				run  func(bd *benchDB, k string, id int) error
			}{
				{"raw-1/tx-8clients", func(bd *benchDB, k string, id int) error { return bd.raw(ctx, k, id) }},
				{"Process-1/tx-8clients", func(bd *benchDB, k string, id int) error {
					_, err := bd.in.Process(ctx, k, bd.credit(id))
					return err
				}},
			} {
				b.Run(op.name, func(b *testing.B) {
					bd := openBench(b, d)
					b.ResetTimer()
					b.SetParallelism(4)
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							k, id := bd.key()
							if err := op.run(bd, k, id); err != nil {
								b.Error(err)
								return
							}
						}
					})
					reportRate(b, 1)
				})
			}
		})
	}
}

// BenchmarkInboxBytesPerKey measures the storage of recorded keys: 200,000
// UUID-text keys (36 bytes) of one consumer, table plus indexes, divided by
// the number of keys. Run it once:
//
//	go test -run '^$' -bench BytesPerKey -benchtime 1x ./inbox
func BenchmarkInboxBytesPerKey(b *testing.B) {
	const keys = 200_000
	for _, d := range []sqldialect.Dialect{sqldialect.SQLite, sqldialect.Postgres} {
		b.Run(d.String(), func(b *testing.B) {
			for b.Loop() {
				bd := openBench(b, d)
				ctx := context.Background()
				msgs := make([]inbox.Message, 1000)
				for i := 0; i < keys; i += len(msgs) {
					for j := range msgs {
						n := uint64(i + j)
						// Time-ordered UUID text, as UUIDv7 keys are.
						msgs[j].Key = fmt.Sprintf("%08x-%04x-7%03x-8%03x-%012x", n>>16, n&0xffff, n%4096, (n*7)%4096, n*2654435761%(1<<48))
					}
					if _, err := bd.in.ProcessBatch(ctx, msgs, func(context.Context, *sql.Tx, inbox.Message) error { return nil }); err != nil {
						b.Fatal(err)
					}
				}
				var bytes int64
				switch d {
				case sqldialect.Postgres:
					if _, err := bd.db.Exec("VACUUM ANALYZE idem_inbox"); err != nil {
						b.Fatal(err)
					}
					if err := bd.db.QueryRow("SELECT pg_total_relation_size('idem_inbox')").Scan(&bytes); err != nil {
						b.Fatal(err)
					}
				case sqldialect.SQLite:
					// Pages of the key table and its index, from dbstat when the
					// build has it, else the whole file after VACUUM.
					err := bd.db.QueryRow("SELECT SUM(pgsize) FROM dbstat WHERE name IN ('idem_inbox', 'idem_inbox_processed_at')").Scan(&bytes)
					if err != nil {
						b.Logf("dbstat unavailable (%v): using the file size after VACUUM", err)
						var pages, size int64
						_, _ = bd.db.Exec("VACUUM")
						_ = bd.db.QueryRow("PRAGMA page_count").Scan(&pages)
						_ = bd.db.QueryRow("PRAGMA page_size").Scan(&size)
						bytes = pages * size
					}
				}
				b.ReportMetric(float64(bytes)/keys, "B/key")
				b.ReportMetric(0, "ns/op")
			}
		})
	}
}

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
