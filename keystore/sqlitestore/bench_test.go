package sqlitestore_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/sqlitestore"
)

// BenchmarkSQLite compares, on one *sql.DB with one connection at the same
// concurrency (4×GOMAXPROCS goroutines; SQLite serialises writers anyway),
// WAL with synchronous=NORMAL, one write per transaction:
//
//   - insert: INSERT … ON CONFLICT DO NOTHING into a table keyed like
//     sqlitestore's, the plain dedup write;
//   - reserve: sqlitestore's Reserve (one short write transaction);
//   - reserve+complete: the whole protocol for one key.
func BenchmarkSQLite(b *testing.B) {
	ctx := context.Background()
	db := testenv.SQLite(b)
	// One connection: writers queue in database/sql instead of in SQLite's
	// busy handler, which sleeps. Both sides get the same.
	db.SetMaxOpenConns(1)
	s, err := sqlitestore.New(db)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE raw_keys (scope TEXT NOT NULL, idem_key BLOB NOT NULL, PRIMARY KEY (scope, idem_key))`); err != nil {
		b.Fatal(err)
	}
	run := func(b *testing.B, op func(key string) error) {
		var next atomic.Uint64
		b.SetParallelism(4)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := op(b.Name() + "-" + strconv.FormatUint(next.Add(1), 10)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	b.Run("insert", func(b *testing.B) {
		run(b, func(key string) error {
			_, err := db.ExecContext(ctx, `INSERT INTO raw_keys (scope, idem_key) VALUES (?, ?) ON CONFLICT DO NOTHING`, "default", []byte(key))
			return err
		})
	})
	b.Run("reserve", func(b *testing.B) {
		run(b, func(key string) error {
			_, err := s.Reserve(ctx, key, nil, time.Minute)
			return err
		})
	})
	b.Run("reserve+complete", func(b *testing.B) {
		run(b, func(key string) error {
			c, err := s.Reserve(ctx, key, nil, time.Minute)
			if err != nil || c.State != keystore.Acquired {
				return err
			}
			return s.Complete(ctx, c, []byte("ok"), time.Minute)
		})
	})
}
