package sqlstore_test

import (
	"context"
	"database/sql"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/sqldialect"
)

// BenchmarkStore compares, on one pool at the same concurrency
// (4×GOMAXPROCS goroutines, one write per transaction):
//
//   - insert: INSERT … ON CONFLICT DO NOTHING into a table keyed like the
//     store's, the plain dedup write;
//   - reserve: the store's Reserve, one statement like insert (SQLite: one
//     short write transaction);
//   - reserve+complete: the whole protocol for one key, two statements.
//
// PostgreSQL runs with fsync on and 16 connections; SQLite in WAL with
// synchronous=NORMAL and one connection, so that writers queue in
// database/sql instead of in SQLite's busy handler, which sleeps (both sides
// get the same).
func BenchmarkStore(b *testing.B) {
	for _, dc := range dialects {
		b.Run(dc.d.String(), func(b *testing.B) {
			db := dc.open(b)
			db.SetMaxOpenConns(16)
			table := `CREATE TABLE raw_keys (scope text NOT NULL, idem_key bytea NOT NULL, PRIMARY KEY (scope, idem_key))`
			if dc.d == sqldialect.SQLite {
				db.SetMaxOpenConns(1)
				table = `CREATE TABLE raw_keys (scope TEXT NOT NULL, idem_key BLOB NOT NULL, PRIMARY KEY (scope, idem_key))`
			}
			s := newStore(b, db, dc.d)
			if _, err := db.Exec(table); err != nil {
				b.Fatal(err)
			}
			insert := "INSERT INTO raw_keys (scope, idem_key) VALUES (" + dc.d.Placeholders(1, 2) + ") ON CONFLICT DO NOTHING"
			runSQL(b, db, s, insert)
		})
	}
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
