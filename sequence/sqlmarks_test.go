package sequence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/testsupport/dbtest"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/sequence"
	"github.com/idem-go/idem/sqldialect"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

var sqlDialects = dbtest.All

// forEachDialect runs f on a fresh database of every dialect, with the
// marks table and an effects table created.
func forEachDialect(t *testing.T, f func(t *testing.T, d sqldialect.Dialect, db *sql.DB)) {
	for _, sd := range sqlDialects {
		t.Run(sd.Name, func(t *testing.T) {
			t.Parallel()
			db := sd.Open(t)
			m, err := sequence.NewSQLMarks(sd.D, "setup")
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for range 2 { // Migrate is idempotent
				if err := m.Migrate(ctx, db); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := db.ExecContext(ctx, "CREATE TABLE effects (consumer VARCHAR(64) NOT NULL, producer_id BIGINT NOT NULL, seq INTEGER NOT NULL)"); err != nil {
				t.Fatal(err)
			}
			f(t, sd.D, db)
		})
	}
}

// deliver runs one delivery the way a consumer does: in one transaction,
// advance the mark and, if applied, write the effect; commit. Transactions
// the dialect says may be retried are retried.
func deliver(ctx context.Context, d sqldialect.Dialect, db *sql.DB, m *sequence.SQLMarks, consumer string, producer int64, epoch int16, part, seq int32) (bool, error) {
	for attempt := 0; ; attempt++ {
		applied, err := deliverOnce(ctx, d, db, m, consumer, producer, epoch, part, seq)
		if err != nil && d.Retryable(err) && attempt < 50 {
			time.Sleep(time.Duration(attempt+1) * time.Millisecond)
			continue
		}
		return applied, err
	}
}

func deliverOnce(ctx context.Context, d sqldialect.Dialect, db *sql.DB, m *sequence.SQLMarks, consumer string, producer int64, epoch int16, part, seq int32) (bool, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	applied, err := m.Advance(ctx, tx, producer, epoch, part, seq)
	if err != nil || !applied {
		return false, errors.Join(err, tx.Commit())
	}
	q := fmt.Sprintf("INSERT INTO effects (consumer, producer_id, seq) VALUES (%s)", d.Placeholders(1, 3))
	if _, err := tx.ExecContext(ctx, q, consumer, producer, seq); err != nil {
		return false, err
	}
	return true, tx.Commit()
}

func TestSQLMarksRules(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, d sqldialect.Dialect, db *sql.DB) {
		ctx := context.Background()
		for ci, tc := range markCases {
			// Each case is its own consumer: marks are scoped by it.
			consumer := fmt.Sprintf("case-%d", ci)
			m, err := sequence.NewSQLMarks(d, consumer)
			if err != nil {
				t.Fatal(err)
			}
			for i, msg := range tc.msgs {
				apply, err := deliver(ctx, d, db, m, consumer, msg.producer, msg.epoch, msg.part, msg.seq)
				checkMsg(t, i, msg, apply, err)
				if !apply {
					continue
				}
				e, s, ok, err := m.Mark(ctx, db, msg.producer, msg.part)
				if err != nil || !ok || e != msg.epoch || s != msg.seq {
					t.Fatalf("%s: message %d applied but the mark is (%d, %d, %v, %v)", tc.name, i, e, s, ok, err)
				}
			}
		}
	})
}

func TestSQLMarksRollbackLeavesNoMark(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, d sqldialect.Dialect, db *sql.DB) {
		ctx := context.Background()
		m, _ := sequence.NewSQLMarks(d, "c")
		// The effect fails after the mark moved: the transaction rolls
		// back, and the redelivery must apply again.
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if applied, err := m.Advance(ctx, tx, 42, 0, 0, 0); err != nil || !applied {
			t.Fatalf("first delivery: (%v, %v)", applied, err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if _, _, ok, err := m.Mark(ctx, db, 42, 0); err != nil || ok {
			t.Fatalf("a rolled-back Advance left a mark (%v, %v)", ok, err)
		}
		for i, want := range []bool{true, false, false} {
			applied, err := deliver(ctx, d, db, m, "c", 42, 0, 0, 0)
			if err != nil || applied != want {
				t.Fatalf("redelivery %d: (%v, %v), want %v", i, applied, err, want)
			}
		}
		var n int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM effects").Scan(&n); err != nil || n != 1 {
			t.Fatalf("%d effects (%v), want 1", n, err)
		}
	})
}

func TestSQLMarksConcurrentDeliveries(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, d sqldialect.Dialect, db *sql.DB) {
		ctx := context.Background()
		m, _ := sequence.NewSQLMarks(d, "c")
		const goroutines, msgs = 4, 5
		var wg sync.WaitGroup
		errs := make(chan error, goroutines*msgs)
		for range goroutines {
			wg.Go(func() {
				for s := range int32(msgs) {
					// Every goroutine delivers the same messages; the
					// first message of an unseen producer races on INSERT.
					if _, err := deliver(ctx, d, db, m, "c", 9, 0, 0, s); err != nil && !errors.Is(err, sequence.ErrOutOfOrder) {
						errs <- err
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		// A goroutine that lost a race may have been refused as a gap;
		// deliver the tail once more in order, as a redelivery would.
		for s := range int32(msgs) {
			if _, err := deliver(ctx, d, db, m, "c", 9, 0, 0, s); err != nil {
				t.Fatal(err)
			}
		}
		rows, err := db.QueryContext(ctx, "SELECT seq, COUNT(*) FROM effects GROUP BY seq ORDER BY seq")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		seen := 0
		for rows.Next() {
			var seq, n int
			if err := rows.Scan(&seq, &n); err != nil {
				t.Fatal(err)
			}
			if seq != seen || n != 1 {
				t.Fatalf("effect of seq %d applied %d times (expected seq %d once)", seq, n, seen)
			}
			seen++
		}
		if err := rows.Err(); err != nil || seen != msgs {
			t.Fatalf("%d distinct effects (%v), want %d", seen, err, msgs)
		}
	})
}

// TestSQLMarksMatchesHighWater checks the SQL upsert's condition against
// the in-memory rules on random streams: redeliveries, gaps, epoch changes
// and sequences near the wrap.
func TestSQLMarksMatchesHighWater(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, d sqldialect.Dialect, db *sql.DB) {
		ctx := context.Background()
		run := 0
		rapid.Check(t, func(rt *rapid.T) {
			run++
			consumer := fmt.Sprintf("prop-%d", run) // a fresh scope per run
			m, err := sequence.NewSQLMarks(d, consumer)
			if err != nil {
				rt.Fatal(err)
			}
			h := sequence.NewHighWater()
			type pos struct {
				epoch int16
				seq   int32
			}
			last := map[int64]pos{}
			for i := range rapid.IntRange(1, 12).Draw(rt, "messages") {
				p := int64(rapid.IntRange(0, 1).Draw(rt, "producer"))
				cur := last[p]
				epoch := cur.epoch + int16(rapid.IntRange(-1, 1).Draw(rt, "epochDelta"))
				seq := rapid.SampledFrom([]int32{
					0, 1, cur.seq, cur.seq + 1, cur.seq + 2, cur.seq - 1, maxSeq, maxSeq - 1,
				}).Draw(rt, "seq")
				if epoch < 0 || seq < 0 {
					epoch, seq = 0, 0
				}
				want, wantErr := h.Accept(p, epoch, 0, seq)
				got, gotErr := deliver(ctx, d, db, m, consumer, p, epoch, 0, seq)
				if got != want || (gotErr == nil) != (wantErr == nil) ||
					errors.Is(gotErr, sequence.ErrFenced) != errors.Is(wantErr, sequence.ErrFenced) {
					rt.Fatalf("message %d (producer %d epoch %d seq %d): SQL (%v, %v), memory (%v, %v)", i, p, epoch, seq, got, gotErr, want, wantErr)
				}
				if want {
					last[p] = pos{epoch, seq}
				}
			}
		})
	})
}

func TestNewSQLMarksOptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		d        sqldialect.Dialect
		consumer string
		opts     []sequence.Option
	}{
		{"unknown dialect", 0, "c", nil},
		{"empty consumer", sqldialect.SQLite, "", nil},
		{"long consumer", sqldialect.SQLite, strings.Repeat("c", 256), nil},
		{"consumer with NUL", sqldialect.Postgres, "c\x00", nil},
		{"consumer not UTF-8", sqldialect.Postgres, "c\xff", nil},
		{"table not an identifier", sqldialect.Postgres, "c", []sequence.Option{sequence.WithTable("marks; DROP TABLE x")}},
		{"schema on sqlite", sqldialect.SQLite, "c", []sequence.Option{sequence.WithTable("s.marks")}},
		{"idle expiry", sqldialect.SQLite, "c", []sequence.Option{sequence.WithIdleExpiry(time.Hour)}},
	}
	for _, tc := range tests {
		if _, err := sequence.NewSQLMarks(tc.d, tc.consumer, tc.opts...); !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("%s: got %v, want idem.ErrInvalidOption", tc.name, err)
		}
	}
	m, err := sequence.NewSQLMarks(sqldialect.Postgres, "c", sequence.WithTable("app.marks"))
	if err != nil {
		t.Fatal(err)
	}
	if s := m.SchemaSQL(); len(s) != 1 || !strings.HasPrefix(s[0], "CREATE TABLE IF NOT EXISTS app.marks (") {
		t.Fatalf("schema: %q", s)
	}
}

// TestSQLMarksConsumersCompareBytes: marks are scoped by the consumer name
// byte for byte; on MySQL a VARCHAR consumer column with the default
// collation made "Orders" and "orders" share marks.
func TestSQLMarksConsumersCompareBytes(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, d sqldialect.Dialect, db *sql.DB) {
		ctx := context.Background()
		for _, c := range []string{"Orders", "orders", "orders "} {
			m, err := sequence.NewSQLMarks(d, c)
			if err != nil {
				t.Fatal(err)
			}
			if applied, err := deliver(ctx, d, db, m, c, 7, 0, 0, 0); err != nil || !applied {
				t.Fatalf("consumer %q: first message (%v, %v), want applied: another consumer's mark was seen", c, applied, err)
			}
		}
	})
}
