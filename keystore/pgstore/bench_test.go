package pgstore_test

import (
	"context"
	"database/sql"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/pgstore"
)

// BenchmarkPostgres compares, on one pool at the same concurrency
// (4×GOMAXPROCS goroutines, one statement per transaction, fsync on):
//
//   - insert: INSERT … ON CONFLICT DO NOTHING into a table keyed like
//     pgstore's, the plain dedup write;
//   - reserve: pgstore's Reserve, one statement like insert;
//   - reserve+complete: the whole protocol for one key, two statements.
func BenchmarkPostgres(b *testing.B) {
	ctx := context.Background()
	db := testenv.Postgres(b)
	db.SetMaxOpenConns(16)
	s, err := pgstore.New(db)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE raw_keys (scope text NOT NULL, idem_key bytea NOT NULL, PRIMARY KEY (scope, idem_key))`); err != nil {
		b.Fatal(err)
	}
	runSQL(b, db, s, `INSERT INTO raw_keys (scope, idem_key) VALUES ($1, $2) ON CONFLICT DO NOTHING`)
}

func runSQL(b *testing.B, db *sql.DB, s keystore.Store, insert string) {
	ctx := context.Background()
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
			_, err := db.ExecContext(ctx, insert, "default", []byte(key))
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
