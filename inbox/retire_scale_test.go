package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/sqldialect"
)

// TestScaleRetire measures retention (issue 14, goal 3) side by side in one
// run: IDEM_SCALE_RETIRE keys (20k by default, 1M in `make bench-scale`)
// retired by today's row-deleting Sweep on the rows layout, and by dropping
// whole buckets on the bucketed layout, while a tenth as many young keys
// stay. It prints, per engine and layout,
//
//	retire,engine,layout,keys,seconds,wal_bytes,index_density_after,tables_dropped
//
// (IDEM_SCALE_ENGINES narrows the engines, as for TestScaleCurve.)
//
// (PostgreSQL: WAL from pg_current_wal_lsn, density from pgstattuple's
// pgstatindex on the primary keys left, VACUUM included for the rows
// layout; SQLite: bytes appended to the -wal file with auto-checkpoints
// off, and the leaf density from dbstat). It asserts only that the old
// keys are gone and the young ones stay.
func TestScaleRetire(t *testing.T) {
	n := envInt("IDEM_SCALE_RETIRE", 20_000)
	report := scaleReport(t)
	engines := strings.Split(os.Getenv("IDEM_SCALE_ENGINES"), ",")
	if engines[0] == "" {
		engines = []string{"sqlite", "postgres"}
	}
	for _, e := range engines {
		d := map[string]sqldialect.Dialect{"sqlite": sqldialect.SQLite, "postgres": sqldialect.Postgres}[e]
		t.Run(e, func(t *testing.T) {
			for _, layout := range []inbox.Layout{inbox.LayoutRows, inbox.LayoutBuckets} {
				r := newRetireRun(t, d, layout, n)
				start := time.Now()
				wal0 := r.wal(t)
				// The old keys are two days old (rows) or past their
				// buckets' end plus retireAge (buckets); the young ones are
				// younger than either age.
				age := time.Hour
				if layout == inbox.LayoutBuckets {
					age = retireAge
				}
				dropped, err := r.in.Sweep(context.Background(), age, 10_000)
				if err != nil {
					t.Fatal(err)
				}
				if layout == inbox.LayoutRows && d == sqldialect.Postgres {
					if _, err := r.db.Exec("VACUUM idem_inbox"); err != nil {
						t.Fatal(err)
					}
				}
				secs := time.Since(start).Seconds()
				wal := r.wal(t) - wal0
				left := r.count(t)
				if left != young(n) {
					t.Fatalf("%v: %d keys left, want the %d young ones", layout, left, young(n))
				}
				if layout == inbox.LayoutRows {
					dropped = 0 // Sweep counted rows
				}
				report(fmt.Sprintf("retire,%s,%v,%d,%.3f,%d,%.1f,%d", e, layout, n, secs, wal, r.density(t), dropped))
			}
		})
	}
}

func young(n int) int { return max(n/10, 1000) }

// retireAge is the bucketed run's sweep age.
const retireAge = 3 * time.Second

type retireRun struct {
	d      sqldialect.Dialect
	db     *sql.DB
	in     *inbox.Inbox
	layout inbox.Layout
	path   string // SQLite file
}

func newRetireRun(t *testing.T, d sqldialect.Dialect, layout inbox.Layout, n int) *retireRun {
	ctx := context.Background()
	r := &retireRun{d: d, layout: layout}
	switch d {
	case sqldialect.SQLite:
		r.path = filepath.Join(t.TempDir(), "retire.db")
		db, err := sql.Open("sqlite", sqldialect.SQLiteDSN(r.path)+"&_pragma=cache_size(-262144)")
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(1)
		t.Cleanup(func() { db.Close() })
		r.db = db
	case sqldialect.Postgres:
		r.db = testenv.Postgres(t)
		r.db.SetMaxOpenConns(1) // the session's settings below
	}
	in, err := inbox.New(r.db, d, "retire", inbox.WithLayout(layout), inbox.WithBucketWidth(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	r.in = in
	msgs := make([]inbox.Message, 1000)
	for done := 0; done < n; done += len(msgs) {
		for i := range msgs {
			msgs[i] = inbox.Message{Key: uuidV4()}
		}
		if _, err := in.ProcessBatch(ctx, msgs, func(context.Context, *sql.Tx, inbox.Message) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if layout == inbox.LayoutRows {
		// Backdate every key (setup, not measured).
		q := "UPDATE idem_inbox SET processed_at = processed_at - 172800000"
		if d == sqldialect.Postgres {
			q = "UPDATE idem_inbox SET processed_at = processed_at - interval '2 days'"
		}
		if _, err := r.db.Exec(q); err != nil {
			t.Fatal(err)
		}
		if d == sqldialect.Postgres {
			if _, err := r.db.Exec("VACUUM ANALYZE idem_inbox"); err != nil {
				t.Fatal(err)
			}
		}
	} else {
		// Wait out the buckets: their end, the sweep age and the skew margin.
		time.Sleep(2*time.Second + retireAge + 2500*time.Millisecond)
	}
	for done := 0; done < young(n); done += len(msgs) {
		for i := range msgs {
			msgs[i] = inbox.Message{Key: uuidV4()}
		}
		if _, err := in.ProcessBatch(ctx, msgs, func(context.Context, *sql.Tx, inbox.Message) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	switch d {
	case sqldialect.Postgres:
		for _, s := range []string{"CREATE EXTENSION IF NOT EXISTS pgstattuple SCHEMA public", "CHECKPOINT"} {
			if _, err := r.db.Exec(s); err != nil {
				t.Fatal(err)
			}
		}
	case sqldialect.SQLite:
		for _, s := range []string{"PRAGMA wal_autocheckpoint = 0", "PRAGMA wal_checkpoint(TRUNCATE)"} {
			if _, err := r.db.Exec(s); err != nil {
				t.Fatal(err)
			}
		}
	}
	return r
}

// wal returns a WAL position in bytes.
func (r *retireRun) wal(t *testing.T) int64 {
	if r.d == sqldialect.Postgres {
		var b int64
		if err := r.db.QueryRow("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").Scan(&b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	st, err := os.Stat(r.path + "-wal")
	if err != nil {
		return 0
	}
	return st.Size()
}

func (r *retireRun) tables(t *testing.T) []string {
	if r.layout == inbox.LayoutRows {
		return []string{"idem_inbox"}
	}
	q := "SELECT name FROM sqlite_master WHERE type = 'table' AND name GLOB 'idem_inbox_k[0-9]*'"
	if r.d == sqldialect.Postgres {
		q = "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename ~ '^idem_inbox_k[0-9]+$'"
	}
	return queryStrings(t, r.db, q)
}

func (r *retireRun) count(t *testing.T) int {
	total := 0
	for _, tab := range r.tables(t) {
		var c int
		if err := r.db.QueryRow("SELECT COUNT(*) FROM " + tab).Scan(&c); err != nil {
			t.Fatal(err)
		}
		total += c
	}
	return total
}

// density is the average leaf density (%) of the primary keys left,
// weighted by leaf pages (PostgreSQL pgstatindex, SQLite dbstat).
func (r *retireRun) density(t *testing.T) float64 {
	if r.d == sqldialect.SQLite {
		var dens float64
		q := "SELECT 100.0 * SUM(pgsize - unused) / SUM(pgsize) FROM dbstat WHERE pagetype = 'leaf' AND name IN ('" + strings.Join(r.tables(t), "','") + "')"
		if err := r.db.QueryRow(q).Scan(&dens); err != nil {
			t.Fatal(err)
		}
		return dens
	}
	var sum, leaves float64
	for _, tab := range r.tables(t) {
		idx := tab + "_pkey"
		var dens sql.NullFloat64
		var lp int64
		err := r.db.QueryRow("SELECT CASE WHEN avg_leaf_density = 'NaN' THEN NULL ELSE avg_leaf_density END, leaf_pages FROM public.pgstatindex($1)", idx).Scan(&dens, &lp)
		if err != nil {
			t.Fatal(err)
		}
		if !dens.Valid { // an index of one page: no leaf level yet
			continue
		}
		sum += dens.Float64 * float64(lp)
		leaves += float64(lp)
	}
	if leaves == 0 {
		return 0
	}
	return sum / leaves
}
