package sqlstore_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/internal/uuidtext"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/sqlstore"
	"github.com/idem-go/idem/sqldialect"
)

// scaleKeys is IDEM_SQLSTORE_SCALE (5k by default, so that `make test`
// runs the scale tests quickly and asserts no speed; 1M for the numbers in
// docs/benchmarks.md).
func scaleKeys(t *testing.T) int {
	return testenv.EnvInt(t, "IDEM_SQLSTORE_SCALE", 5_000, 1000)
}

// report prints a result line on stdout when IDEM_SQLSTORE_SCALE is set,
// else to the test log (make test's short run).
func report(t *testing.T, format string, args ...any) {
	if os.Getenv("IDEM_SQLSTORE_SCALE") != "" {
		fmt.Printf(format, args...)
		return
	}
	t.Logf(format, args...)
}

// uuidV4s returns n random UUIDv4 texts.
func uuidV4s(n int) []string {
	out := make([]string, n)
	for i := range out {
		var u [16]byte
		_, _ = rand.Read(u[:])
		u[6] = u[6]&0x0f | 0x40
		u[8] = u[8]&0x3f | 0x80
		out[i] = uuidtext.Format(u)
	}
	return out
}

// scaleDB opens a database for the scale tests: PostgreSQL as the other
// tests do; SQLite on a file (its path returned) in WAL mode with one
// connection and a 256 MiB page cache.
func scaleDB(t *testing.T, d sqldialect.Dialect) (*sql.DB, string) {
	if d == sqldialect.Postgres {
		db := testenv.Postgres(t)
		db.SetMaxOpenConns(16)
		return db, ""
	}
	path := filepath.Join(t.TempDir(), "scale.db")
	db, err := sql.Open("sqlite", sqldialect.SQLiteDSN(path)+"&_pragma=cache_size(-262144)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db, path
}

// layoutStore returns a store on table in layout l: the rows layout as
// the earlier release created it, the digest layout by Migrate.
func layoutStore(t *testing.T, db *sql.DB, d sqldialect.Dialect, table string, l sqlstore.Layout) *sqlstore.Store {
	if l == sqlstore.LayoutRows {
		oldTable(t, db, d, table)
	}
	s := newStore(t, db, d, sqlstore.WithTable(table))
	wantLayout(t, s, l)
	return s
}

// bareTable creates a table keyed by a bare 16-byte uuid (PostgreSQL) or
// BLOB (SQLite, WITHOUT ROWID: the bare index) and fills it with n random values.
func bareTable(t *testing.T, db *sql.DB, d sqldialect.Dialect, n int) {
	ddl, val := `CREATE TABLE bare_keys (d uuid PRIMARY KEY)`, "gen_random_uuid()"
	if d == sqldialect.SQLite {
		ddl, val = `CREATE TABLE bare_keys (d BLOB PRIMARY KEY) WITHOUT ROWID`, "randomblob(16)"
	}
	if _, err := db.Exec(ddl); err != nil {
		t.Fatal(err)
	}
	row := "(" + val + ")"
	values := strings.TrimSuffix(strings.Repeat(row+",", 1000), ",")
	for done := 0; done < n; done += 1000 {
		if _, err := db.Exec(`INSERT INTO bare_keys (d) VALUES ` + values); err != nil {
			t.Fatal(err)
		}
	}
}

// tableBytes is the size of table with its indexes (PostgreSQL after
// VACUUM ANALYZE: pg_total_relation_size; SQLite: its pages in dbstat).
func tableBytes(t *testing.T, db *sql.DB, d sqldialect.Dialect, table string) int64 {
	var b int64
	var err error
	if d == sqldialect.Postgres {
		if _, err = db.Exec("VACUUM ANALYZE " + table); err == nil {
			err = db.QueryRow("SELECT pg_total_relation_size($1::regclass)", table).Scan(&b)
		}
	} else {
		err = db.QueryRow(`SELECT sum(pgsize) FROM dbstat WHERE name IN (SELECT name FROM sqlite_master WHERE tbl_name = ?)`, table).Scan(&b)
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// runKeys runs Reserve + Complete for keys on c goroutines and returns
// keys per second.
func runKeys(t *testing.T, s keystore.Store, keys []string, c int) float64 {
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range c {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(keys)); i = next.Add(1) - 1 {
				if err := testenv.ReserveComplete(ctx, s, keys[i]); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return float64(len(keys)) / time.Since(start).Seconds()
}

// TestScaleKeys measures, in one run per engine, the bytes per key of
// IDEM_SQLSTORE_SCALE random UUIDv4 keys (done, empty results) in the rows
// layout, the digest layout and a bare table keyed by 16 random bytes,
// then the Reserve + Complete rate of new keys on the two filled layouts,
// taking turns at going first, and the time MigrateLayout takes to move
// the filled rows-layout table. It prints
//
//	bytes,engine,layout,keys,bytes_per_key
//	rate,engine,round,keys,rows_per_s,digest_per_s,digest/rows,rows_wal_per_key,digest_wal_per_key
//	migrate,engine,keys,seconds
//
// (WAL bytes per key on PostgreSQL only: the whole server's, so other
// sessions' writes count too; 0 on SQLite)
// and asserts only that every key was stored.
func TestScaleKeys(t *testing.T) {
	n := scaleKeys(t)
	for _, dc := range dialects {
		t.Run(dc.d.String(), func(t *testing.T) {
			ctx := context.Background()
			db, _ := scaleDB(t, dc.d)
			keys := uuidV4s(n)
			stores := map[sqlstore.Layout]*sqlstore.Store{}
			for _, l := range []sqlstore.Layout{sqlstore.LayoutRows, sqlstore.LayoutDigest} {
				table := l.String() + "_keys"
				s := layoutStore(t, db, dc.d, table, l)
				if err := sqlstore.LoadDone(ctx, s, keys, time.Hour, 0); err != nil {
					t.Fatal(err)
				}
				stores[l] = s
				b := tableBytes(t, db, dc.d, table)
				report(t, "bytes,%s,%v,%d,%.1f\n", dc.d, l, n, float64(b)/float64(n))
			}
			bareTable(t, db, dc.d, n)
			report(t, "bytes,%s,bare,%d,%.1f\n", dc.d, n, float64(tableBytes(t, db, dc.d, "bare_keys"))/float64(n))
			if k, err := stores[sqlstore.LayoutDigest].Inspect(ctx, keys[n/2]); err != nil || k.State != keystore.Done {
				t.Fatalf("Inspect of a loaded key: %+v %v", k, err)
			}
			c := 16
			if dc.d == sqldialect.SQLite {
				c = 8
			}
			m := max(500, n/200)
			for round := range 4 {
				order := []sqlstore.Layout{sqlstore.LayoutRows, sqlstore.LayoutDigest}
				if round%2 == 1 {
					order[0], order[1] = order[1], order[0]
				}
				rate, wal := map[sqlstore.Layout]float64{}, map[sqlstore.Layout]float64{}
				for _, l := range order {
					w0 := walLSN(t, db, dc.d)
					rate[l] = runKeys(t, stores[l], uuidV4s(m), c)
					wal[l] = float64(walLSN(t, db, dc.d)-w0) / float64(m)
				}
				report(t, "rate,%s,%d,%d,%.0f,%.0f,%.2f,%.0f,%.0f\n", dc.d, round, m, rate[sqlstore.LayoutRows], rate[sqlstore.LayoutDigest], rate[sqlstore.LayoutDigest]/rate[sqlstore.LayoutRows], wal[sqlstore.LayoutRows], wal[sqlstore.LayoutDigest])
			}
			// The rows-layout table, now n + 4m live keys, moved by
			// MigrateLayout (the time writers wait).
			t0 := time.Now()
			if err := stores[sqlstore.LayoutRows].MigrateLayout(ctx); err != nil {
				t.Fatal(err)
			}
			report(t, "migrate,%s,%d,%.3f\n", dc.d, n+4*m, time.Since(t0).Seconds())
			if k, err := stores[sqlstore.LayoutRows].Inspect(ctx, keys[0]); err != nil || k.State != keystore.Done {
				t.Fatalf("Inspect after MigrateLayout: %+v %v", k, err)
			}
		})
	}
}

// TestScaleRetire measures retiring IDEM_SQLSTORE_SCALE expired keys while
// a tenth as many live ones stay, side by side in one run per engine:
// Sweep on the rows layout, Sweep on the digest layout, and, for the
// decision, dropping a partition that holds the same rows in the digest
// layout's row shape (PostgreSQL: a table partitioned by expires_at, the
// expired partition detached and dropped; SQLite: a table of its own,
// dropped). It prints
//
//	retire,engine,way,keys,seconds,wal_bytes,pk_leaf_density_after
//
// (PostgreSQL: WAL from pg_current_wal_lsn after a CHECKPOINT, VACUUM of
// the table included for Sweep, density from pgstattuple's pgstatindex;
// SQLite: bytes appended to the -wal file with auto-checkpoints off, leaf
// density from dbstat), and asserts that the live keys, and only they,
// stay.
func TestScaleRetire(t *testing.T) {
	n := scaleKeys(t)
	live := max(n/10, 1000)
	for _, dc := range dialects {
		t.Run(dc.d.String(), func(t *testing.T) {
			ctx := context.Background()
			db, path := scaleDB(t, dc.d)
			if dc.d == sqldialect.Postgres {
				db.SetMaxOpenConns(1) // one session: the extension and CHECKPOINT
				if _, err := db.Exec("CREATE EXTENSION IF NOT EXISTS pgstattuple SCHEMA public"); err != nil {
					t.Fatal(err)
				}
			}
			load := func(s *sqlstore.Store) {
				err := sqlstore.LoadDone(ctx, s, uuidV4s(n), -time.Hour, 0)
				if err == nil {
					err = sqlstore.LoadDone(ctx, s, uuidV4s(live), time.Hour, int64(n))
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			r := &retire{t: t, db: db, d: dc.d, path: path, n: n, live: live}
			for _, l := range []sqlstore.Layout{sqlstore.LayoutRows, sqlstore.LayoutDigest} {
				table := "sweep_" + l.String()
				s := layoutStore(t, db, dc.d, table, l)
				load(s)
				r.measure("sweep-"+l.String(), table, pkName(dc.d, table, l), func() {
					if _, err := s.Sweep(ctx, 10_000); err != nil {
						t.Fatal(err)
					}
					if dc.d == sqldialect.Postgres {
						if _, err := db.Exec("VACUUM " + table); err != nil {
							t.Fatal(err)
						}
					}
				})
			}
			// The same rows, one partition (table) for the expired ones.
			src := layoutStore(t, db, dc.d, "part_src", sqlstore.LayoutDigest)
			load(src)
			cols := "d, expires_at, token, takeovers, state, name, fingerprint, result"
			now := "now()"
			var ddl []string
			cut := time.Now().UTC().Format(time.RFC3339Nano) // after the expired keys, before the live ones
			if dc.d == sqldialect.Postgres {
				ddl = []string{
					`CREATE TABLE part_keys (d uuid NOT NULL, expires_at timestamptz NOT NULL, token bigint NOT NULL, takeovers integer NOT NULL,
	state smallint NOT NULL, name bytea NOT NULL, fingerprint bytea, result bytea, PRIMARY KEY (d, expires_at)) PARTITION BY RANGE (expires_at)`,
					`CREATE TABLE part_old PARTITION OF part_keys FOR VALUES FROM (MINVALUE) TO ('` + cut + `')`,
					`CREATE TABLE part_live PARTITION OF part_keys FOR VALUES FROM ('` + cut + `') TO (MAXVALUE)`,
					`INSERT INTO part_keys SELECT ` + cols + ` FROM part_src`,
					`VACUUM ANALYZE part_keys`,
				}
			} else {
				now = "(CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000)"
				shape := ` (d BLOB NOT NULL, expires_at INTEGER NOT NULL, token INTEGER NOT NULL, takeovers INTEGER NOT NULL,
	state INTEGER NOT NULL, name BLOB NOT NULL, fingerprint BLOB, result BLOB)`
				ddl = []string{
					`CREATE TABLE part_old` + shape, `CREATE TABLE part_live` + shape,
					`CREATE UNIQUE INDEX part_old_digest ON part_old (d)`, `CREATE UNIQUE INDEX part_live_digest ON part_live (d)`,
					`INSERT INTO part_old SELECT ` + cols + ` FROM part_src WHERE expires_at <= ` + now,
					`INSERT INTO part_live SELECT ` + cols + ` FROM part_src WHERE expires_at > ` + now,
				}
			}
			ddl = append(ddl, `DROP TABLE part_src`)
			for _, st := range ddl {
				if _, err := db.Exec(st); err != nil {
					t.Fatalf("%s: %v", st, err)
				}
			}
			drop := []string{`DROP TABLE part_old`}
			if dc.d == sqldialect.Postgres {
				drop = []string{`ALTER TABLE part_keys DETACH PARTITION part_old`, `DROP TABLE part_old`}
			}
			countOf := "part_live"
			if dc.d == sqldialect.Postgres {
				countOf = "part_keys"
			}
			r.measure("drop-partition", countOf, pkName(dc.d, "part_live", sqlstore.LayoutDigest), func() {
				for _, st := range drop {
					if _, err := db.Exec(st); err != nil {
						t.Fatal(err)
					}
				}
			})
		})
	}
}

// pkName is the B-tree of table's key: the primary key's index, or the
// digest index.
func pkName(d sqldialect.Dialect, table string, l sqlstore.Layout) string {
	switch {
	case d == sqldialect.Postgres && table == "part_live":
		return "part_live_pkey"
	case d == sqldialect.Postgres && l == sqlstore.LayoutRows:
		return table + "_pkey"
	case d == sqldialect.Postgres:
		return table + "_digest"
	case l == sqlstore.LayoutRows:
		return "sqlite_autoindex_" + table + "_1"
	}
	return table + "_digest"
}

type retire struct {
	t       *testing.T
	db      *sql.DB
	d       sqldialect.Dialect
	path    string
	n, live int
}

// measure runs retire from a checkpointed start and prints its line.
func (r *retire) measure(way, table, pk string, retire func()) {
	t := r.t
	start := []string{"CHECKPOINT"}
	if r.d == sqldialect.SQLite {
		start = []string{"PRAGMA wal_autocheckpoint = 0", "PRAGMA wal_checkpoint(TRUNCATE)"}
	}
	for _, st := range start {
		if _, err := r.db.Exec(st); err != nil {
			t.Fatal(err)
		}
	}
	wal0 := r.wal()
	t0 := time.Now()
	retire()
	secs := time.Since(t0).Seconds()
	wal := r.wal() - wal0
	var left int
	if err := r.db.QueryRow("SELECT count(*) FROM " + table).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != r.live {
		t.Fatalf("%s: %d keys left, want the %d live ones", way, left, r.live)
	}
	var dens float64
	var err error
	if r.d == sqldialect.Postgres {
		err = r.db.QueryRow("SELECT avg_leaf_density FROM public.pgstatindex($1)", pk).Scan(&dens)
	} else {
		err = r.db.QueryRow("SELECT 100.0 * sum(pgsize - unused) / sum(pgsize) FROM dbstat WHERE pagetype = 'leaf' AND name = ?", pk).Scan(&dens)
	}
	if err != nil {
		t.Fatal(err)
	}
	report(r.t, "retire,%s,%s,%d,%.3f,%d,%.1f\n", r.d, way, r.n, secs, wal, dens)
}

// walLSN is PostgreSQL's WAL position in bytes; 0 on SQLite.
func walLSN(t *testing.T, db *sql.DB, d sqldialect.Dialect) int64 {
	var b int64
	if d == sqldialect.Postgres {
		if err := db.QueryRow("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").Scan(&b); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// wal is the WAL position in bytes (PostgreSQL) or the -wal file's size.
func (r *retire) wal() int64 {
	if r.d == sqldialect.Postgres {
		return walLSN(r.t, r.db, r.d)
	}
	st, err := os.Stat(r.path + "-wal")
	if err != nil {
		return 0
	}
	return st.Size()
}
