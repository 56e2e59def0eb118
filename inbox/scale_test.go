package inbox_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/internal/testsupport/dbtest"
	"github.com/idem-go/idem/internal/testsupport/inboxtest"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/internal/uuidtext"
	"github.com/idem-go/idem/sqldialect"
)

// The scale curve (issue 14): ProcessBatchSet, 100 messages a transaction,
// one set-based UPDATE per batch, into tables that grow to
// IDEM_SCALE_KEYS keys. UUIDv7 and UUIDv4 keys run side by side in one
// process, on two databases of one engine, interleaved step by step
// (IDEM_SCALE_STEP keys each), so both see the same machine noise. It
// prints one CSV line per step and engine and key kind:
//
//	engine,layout,keys,msgs_per_s,buckets,bytes_per_key
//
// and appends them to IDEM_SCALE_CSV when set (the chart's input, see
// tools/benchchart). Without the variables it runs at 20k keys, to keep the
// code working in `make test`; it asserts only that every key was recorded
// once. The full run: `make bench-scale` (docs/benchmarks.md).

type scaleSide struct {
	kind string // "v4" or "v7", with "-rows" for the rows layout (the baseline), "-plain" for SQLite buckets without runs
	db   *sql.DB
	in   *inbox.Inbox
	d    sqldialect.Dialect
	n    int
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func uuidV4() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return uuidtext.Format(b)
}

func uuidV7(ms uint64) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	var t [8]byte
	binary.BigEndian.PutUint64(t[:], ms)
	copy(b[:6], t[2:])
	b[6] = b[6]&0x0f | 0x70
	b[8] = b[8]&0x3f | 0x80
	return uuidtext.Format(b)
}

func openScale(t *testing.T, d sqldialect.Dialect, kind string, width time.Duration) *scaleSide {
	t.Helper()
	var db *sql.DB
	var err error
	switch d {
	case sqldialect.SQLite:
		// A 16 MiB page cache, as docs/inbox.md recommends for runs (a
		// 256 MiB one cost UUIDv4 keys a third of their CPU at 20M: every
		// commit scans the cached pages); both key kinds get the same.
		db, err = sql.Open("sqlite", sqldialect.SQLiteDSN(filepath.Join(t.TempDir(), kind+".db"))+"&_pragma=cache_size(-"+strconv.Itoa(envInt("IDEM_SCALE_SQLITE_CACHE_KB", 16384))+")")
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(1)
		t.Cleanup(func() { db.Close() })
	case sqldialect.Postgres:
		db = testenv.Postgres(t)
	case sqldialect.MySQL:
		db = openScaleMariaDB(t)
	}
	opts := []inbox.Option{inbox.WithBucketWidth(width)}
	if strings.HasSuffix(kind, "-rows") {
		opts = []inbox.Option{inbox.WithLayout(inbox.LayoutRows)}
	}
	in := inboxtest.Migrated(t, db, d, "scale", opts...)
	if strings.HasSuffix(kind, "-plain") && d == sqldialect.SQLite {
		// Plain buckets, without runs: the meta of the first bucketed
		// build, read by a new Inbox.
		for _, q := range []string{
			"UPDATE idem_inbox_meta SET name = 'bucket_seconds' WHERE name = 'run_bucket_seconds'",
			"DELETE FROM idem_inbox_meta WHERE name = 'runs'",
		} {
			if _, err := db.Exec(q); err != nil {
				t.Fatal(err)
			}
		}
		var err error
		if in, err = inbox.New(db, d, "scale", opts...); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec("CREATE TABLE wallet (id INT PRIMARY KEY, balance BIGINT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < benchWallets; i++ {
		if _, err := db.Exec("INSERT INTO wallet (id, balance) VALUES (" + strconv.Itoa(i) + ", 0)"); err != nil {
			t.Fatal(err)
		}
	}
	return &scaleSide{kind: kind, db: db, in: in, d: d}
}

// run processes n new keys and returns the time it took.
func (s *scaleSide) run(t *testing.T, n int) time.Duration {
	t.Helper()
	ctx := context.Background()
	bd := &benchDB{d: s.d, db: s.db}
	set := func(ctx context.Context, tx *sql.Tx, fresh []inbox.Message) error {
		ids := make([]int, len(fresh))
		for i, m := range fresh {
			ids[i] = m.Value.(int)
		}
		return bd.creditMany(ctx, tx, ids)
	}
	msgs := make([]inbox.Message, 100)
	start := time.Now()
	for done := 0; done < n; done += len(msgs) {
		for i := range msgs {
			k := uuidV4()
			if strings.HasPrefix(s.kind, "v7") {
				k = uuidV7(uint64(time.Now().UnixMilli()))
			}
			msgs[i] = inbox.Message{Key: k, Value: (s.n + done + i) % benchWallets}
		}
		res, err := s.in.ProcessBatchSet(ctx, msgs, set, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if !r.Applied || r.Err != nil {
				t.Fatalf("%s key %s: applied=%v err=%v", s.kind, r.Key, r.Applied, r.Err)
			}
		}
	}
	s.n += n
	return time.Since(start)
}

// tables returns the bucket tables of idem_inbox.
func (s *scaleSide) tables(t *testing.T) []string {
	if strings.HasSuffix(s.kind, "-rows") {
		return []string{"idem_inbox"}
	}
	return dbtest.Strings(t, s.db, bucketTablesSQL(s.d, "idem_inbox"))
}

// bytesOf returns the on-disk size of the named tables with their indexes.
func bytesOf(t *testing.T, db *sql.DB, d sqldialect.Dialect, names []string) int64 {
	t.Helper()
	var total int64
	for _, n := range names {
		var b int64
		var err error
		switch d {
		case sqldialect.Postgres:
			err = db.QueryRow("SELECT pg_total_relation_size('" + n + "')").Scan(&b)
		case sqldialect.MySQL:
			b, err = mariadbBytes(db, n)
		default:
			err = db.QueryRow("SELECT COALESCE(SUM(pgsize), 0) FROM dbstat WHERE name = ?", n).Scan(&b)
		}
		if err != nil {
			t.Fatal(err)
		}
		total += b
	}
	return total
}

// scaleReport returns a function that logs a result line and appends it to
// IDEM_SCALE_CSV when that is set.
func scaleReport(t *testing.T) func(string) {
	var csv *os.File
	if p := os.Getenv("IDEM_SCALE_CSV"); p != "" {
		f, err := os.OpenFile(p, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		csv = f
	}
	return func(line string) {
		t.Log(line)
		if csv != nil {
			fmt.Fprintln(csv, line)
		}
	}
}

func TestScaleCurve(t *testing.T) {
	total := envInt("IDEM_SCALE_KEYS", 10_000) // the suite's short run; make bench-scale sets millions
	step := envInt("IDEM_SCALE_STEP", total/4)
	// 3 s buckets in the short run: the slower engines still cross bucket
	// boundaries (the bucket tests cover boundaries on purpose), without a
	// new bucket table every second on a loaded host (1 s buckets once
	// churned faster than a batch could commit, at ~400 msg/s).
	width := time.Duration(envInt("IDEM_SCALE_BUCKET_SECONDS", 3)) * time.Second
	engines := scaleEngines()
	inbox.SetRunSizes(envInt("IDEM_SCALE_RUN_FLUSH", 0), envInt("IDEM_SCALE_RUN_FANOUT", 0))
	report := scaleReport(t)
	for _, e := range engines {
		d := scaleDialects[e]
		t.Run(e, func(t *testing.T) {
			kinds := strings.Split(os.Getenv("IDEM_SCALE_SIDES"), ",")
			if kinds[0] == "" {
				kinds = []string{"v7", "v4", "v7-rows"}
			}
			var sides []*scaleSide
			for _, k := range kinds {
				sides = append(sides, openScale(t, d, k, width))
			}
			for done := 0; done < total; done += step {
				// Interleaved in chunks of at most 20k keys, so that every
				// side of a step sees the same minutes of machine noise.
				took := make([]time.Duration, len(sides))
				chunk := min(step, 20_000)
				for c := 0; c < step; c += chunk {
					for j := range sides {
						// Each chunk a different side goes first.
						i := (j + c/chunk) % len(sides)
						// Labelled, so a CPU profile of the run
						// (-cpuprofile) splits by side: -tagfocus side=v4.
						pprof.Do(context.Background(), pprof.Labels("side", sides[i].kind), func(context.Context) {
							took[i] += sides[i].run(t, min(chunk, step-c))
						})
					}
				}
				for i, s := range sides {
					rate := float64(step) / took[i].Seconds()
					tabs := s.tables(t)
					var bpk float64
					if d != sqldialect.SQLite || done+step >= total || os.Getenv("IDEM_SCALE_CSV") != "" {
						names := tabs
						if d == sqldialect.SQLite && strings.HasSuffix(s.kind, "-rows") {
							names = append(names, "idem_inbox_processed_at")
						}
						bpk = float64(bytesOf(t, s.db, d, names)) / float64(s.n)
					}
					nb := 0 // buckets: SQLite's run tables (…_k<start>_r…) are not
					for _, n := range tabs {
						if !strings.Contains(strings.TrimPrefix(n, "idem_inbox_k"), "_r") {
							nb++
						}
					}
					report(fmt.Sprintf("%s,%s,%d,%.0f,%d,%.1f", e, s.kind, s.n, rate, nb, bpk))
				}
			}
			for _, s := range sides {
				var n int
				for _, tab := range s.tables(t) {
					var c int
					if err := s.db.QueryRow("SELECT COUNT(*) FROM " + tab).Scan(&c); err != nil {
						t.Fatal(err)
					}
					n += c
				}
				if n != s.n {
					t.Fatalf("%s: %d keys recorded, want %d", s.kind, n, s.n)
				}
			}
			if d == sqldialect.Postgres {
				// Sweep packs the sealed buckets (internal/engine/bucketsql/pack.go); bytes a key
				// after, with the newest buckets (sealed for less than a
				// width) still unpacked.
				for _, s := range sides {
					if strings.HasSuffix(s.kind, "-rows") {
						continue
					}
					start := time.Now()
					if _, err := s.in.Sweep(context.Background(), 1000*time.Hour, 1); err != nil {
						t.Fatal(err)
					}
					t.Logf("%s: Sweep packed the sealed buckets in %v", s.kind, time.Since(start).Round(time.Millisecond))
					bpk := float64(bytesOf(t, s.db, d, s.tables(t))) / float64(s.n)
					report(fmt.Sprintf("%s,%s-packed,%d,0,%d,%.1f", e, s.kind, s.n, len(s.tables(t)), bpk))
				}
				// The bare baseline for goal 2: a table keyed by a 16-byte
				// uuid and nothing else, filled in random order with as many
				// rows, in the same run.
				db := sides[0].db
				if _, err := db.Exec("CREATE TABLE bare (id uuid PRIMARY KEY)"); err != nil {
					t.Fatal(err)
				}
				for done := 0; done < sides[0].n; done += 100_000 {
					if _, err := db.Exec("INSERT INTO bare SELECT gen_random_uuid() FROM generate_series(1, $1)", min(100_000, sides[0].n-done)); err != nil {
						t.Fatal(err)
					}
				}
				bare := float64(bytesOf(t, db, d, []string{"bare"})) / float64(sides[0].n)
				report(fmt.Sprintf("%s,bare-uuid,%d,0,1,%.1f", e, sides[0].n, bare))
			}
			if d == sqldialect.MySQL {
				report(fmt.Sprintf("%s,bare-binary16,%d,0,1,%.1f", e, sides[0].n, mariadbBare(t, sides[0].db, sides[0].n)))
			}
		})
	}
}

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
	n := envInt("IDEM_SCALE_RETIRE", 6_000) // the suite's short run
	report := scaleReport(t)
	for _, e := range scaleEngines() {
		d := scaleDialects[e]
		t.Run(e, func(t *testing.T) {
			for _, layout := range []inbox.Layout{inbox.LayoutRows, inbox.LayoutBuckets} {
				if l := os.Getenv("IDEM_SCALE_RETIRE_LAYOUTS"); l != "" && !strings.Contains(l, layout.String()) {
					continue // "rows", "buckets" or both
				}
				r := newRetireRun(t, d, layout, n)
				start := time.Now()
				wal0 := r.wal(t)
				// The old keys are two days old (rows) or past their
				// buckets' end plus retireAge (buckets); the young ones are
				// younger than either age.
				age := time.Hour
				if layout == inbox.LayoutBuckets {
					age = retireAge + time.Since(r.youngStart)
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
	// youngStart: when the young keys began; the bucketed sweep's age
	// covers them however long they took to insert.
	youngStart time.Time
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
	case sqldialect.MySQL:
		r.db = openScaleMariaDB(t)
	}
	in := inboxtest.Migrated(t, r.db, d, "retire", inbox.WithLayout(layout), inbox.WithBucketWidth(2*time.Second))
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
		switch d {
		case sqldialect.Postgres:
			q = "UPDATE idem_inbox SET processed_at = processed_at - interval '2 days'"
		case sqldialect.MySQL:
			q = "UPDATE idem_inbox SET processed_at = processed_at - INTERVAL 2 DAY"
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
		time.Sleep(2*time.Second + retireAge + 3500*time.Millisecond)
	}
	r.youngStart = time.Now()
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

// wal returns a WAL position in bytes (MariaDB: the redo log bytes
// written, Innodb_os_log_written; the server runs without a binlog).
func (r *retireRun) wal(t *testing.T) int64 {
	if r.d == sqldialect.MySQL {
		var name string
		var b int64
		if err := r.db.QueryRow("SHOW GLOBAL STATUS LIKE 'Innodb_os_log_written'").Scan(&name, &b); err != nil {
			t.Fatal(err)
		}
		return b
	}
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
	return dbtest.Strings(t, r.db, bucketTablesSQL(r.d, "idem_inbox"))
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
// weighted by leaf pages (PostgreSQL pgstatindex, SQLite dbstat; MariaDB
// is not measured: 0).
func (r *retireRun) density(t *testing.T) float64 {
	if r.d == sqldialect.MySQL {
		return 0
	}
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

// TestScaleMariaDBRowShape measures, on MariaDB/MySQL, the row shape a
// bucketed layout would use there (a BINARY(16) digest primary key with
// nullable fingerprint and key columns, as on SQLite and PostgreSQL) beside
// today's rows layout and a bare BINARY(16) table, with IDEM_SCALE_MARIADB
// random keys each (20k by default), in one run, by bulk inserts (the
// inbox's own curve on MariaDB is TestScaleCurve's "mariadb" engine). Prints
//
//	mariadb,<table>,keys,0,1,bytes_per_key
func TestScaleMariaDBRowShape(t *testing.T) {
	n := envInt("IDEM_SCALE_MARIADB", 20_000)
	db := testenv.MySQL(t)
	report := scaleReport(t)
	shapes := []struct{ name, ddl string }{
		{"bare-binary16", "CREATE TABLE shape_bare (d BINARY(16) NOT NULL PRIMARY KEY) ENGINE=InnoDB"},
		{"bucket-shape", "CREATE TABLE shape_bucket (d BINARY(16) NOT NULL PRIMARY KEY, fingerprint VARBINARY(64) NULL, idem_key VARBINARY(255) NULL) ENGINE=InnoDB"},
		{"rows-layout", "CREATE TABLE shape_rows (consumer VARBINARY(255) NOT NULL, idem_key VARBINARY(255) NOT NULL, fingerprint VARBINARY(64) NULL, processed_at DATETIME(6) NOT NULL, PRIMARY KEY (consumer, idem_key), KEY shape_rows_processed_at (consumer, processed_at)) ENGINE=InnoDB"},
	}
	for _, s := range shapes {
		if _, err := db.Exec(s.ddl); err != nil {
			t.Fatal(err)
		}
	}
	const batch = 1000
	for done := 0; done < n; done += batch {
		var bare, bucket, rows strings.Builder
		var a1, a2 []any
		for i := 0; i < batch; i++ {
			var d [16]byte
			_, _ = rand.Read(d[:])
			sep := ","
			if i == 0 {
				sep = ""
			}
			bare.WriteString(sep + "(?)")
			bucket.WriteString(sep + "(?, NULL, NULL)")
			rows.WriteString(sep + "('scale', ?, NULL, UTC_TIMESTAMP(6))")
			a1 = append(a1, d[:])
			a2 = append(a2, uuidV4())
		}
		for _, q := range []struct {
			sql  string
			args []any
		}{
			{"INSERT INTO shape_bare (d) VALUES " + bare.String(), a1},
			{"INSERT INTO shape_bucket (d, fingerprint, idem_key) VALUES " + bucket.String(), a1},
			{"INSERT INTO shape_rows (consumer, idem_key, fingerprint, processed_at) VALUES " + rows.String(), a2},
		} {
			if _, err := db.Exec(q.sql, q.args...); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, s := range shapes {
		table := "shape_" + strings.SplitN(s.name, "-", 2)[0]
		if _, err := db.Exec("ANALYZE TABLE " + table); err != nil {
			t.Fatal(err)
		}
		var b int64
		if err := db.QueryRow("SELECT data_length + index_length FROM information_schema.TABLES WHERE table_schema = DATABASE() AND table_name = ?", table).Scan(&b); err != nil {
			t.Fatal(err)
		}
		if b == 0 {
			t.Fatalf("%s: no size", table)
		}
		report(fmt.Sprintf("mariadb,%s,%d,0,1,%.1f", s.name, n, float64(b)/float64(n)))
	}
}
