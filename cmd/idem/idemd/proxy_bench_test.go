package main

import (
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/redisstore"
	"github.com/idem-go/idem/keystore/sqlstore"
	"github.com/idem-go/idem/sqldialect"
	"github.com/redis/go-redis/v9"
)

// BenchmarkProxy measures the Idempotency-Key proxy against the upstream
// called directly, in one run, over loopback TCP with 8 concurrent clients.
// The upstream takes 1 ms per request, like a fast API. It reports req/s and
// the p50 and p99 latency; "added" metrics are the proxy's latency minus the
// direct upstream's in the same run.
//
//	go test -run '^$' -bench Proxy -benchtime 3s ./cmd/idem/idemd
//
// It lives beside the binary because it compares every store the binary
// opens, Redis included, and the core module does not depend on Redis.
func BenchmarkProxy(b *testing.B) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		time.Sleep(time.Millisecond)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"ord_123","status":"created","amount":5000}`)
	}))
	defer upstream.Close()
	target, _ := url.Parse(upstream.URL)
	client := &http.Client{Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256}}

	var direct [2]time.Duration
	b.Run("direct", func(b *testing.B) {
		direct = loadProxy(b, client, upstream.URL, func(int64) string { return fmt.Sprint(time.Now().UnixNano()) })
	})
	stores := []struct {
		name string
		open func(b *testing.B) keystore.Store
	}{
		{"memory", func(b *testing.B) keystore.Store { return servedStore(b, "memory") }},
		{"sqlite-1conn", func(b *testing.B) keystore.Store {
			db := testenv.SQLite(b)
			db.SetMaxOpenConns(1)
			return migratedSQLStore(b, db)
		}},
		// As idem serve opens SQLite: one connection, and WAL checkpoints
		// left to a checkpointer on a second one.
		{"sqlite-serve", func(b *testing.B) keystore.Store {
			return servedStore(b, "sqlite:"+filepath.Join(b.TempDir(), "keys.db"))
		}},
		{"sqlite", func(b *testing.B) keystore.Store { return migratedSQLStore(b, testenv.SQLite(b)) }},
		{"redis", func(b *testing.B) keystore.Store { return benchRedisStore(b) }},
		{"redis-unbatched", func(b *testing.B) keystore.Store { return benchRedisStore(b, redisstore.WithMaxInFlight(0)) }},
	}
	for _, st := range stores {
		for _, mode := range []string{"new-keys", "replays"} {
			b.Run(st.name+"/"+mode, func(b *testing.B) {
				p, err := idemhttp.NewProxy(target, st.open(b))
				if err != nil {
					b.Fatal(err)
				}
				srv := httptest.NewServer(p)
				defer srv.Close()
				key := func(n int64) string { return fmt.Sprintf("new-%s-%d", b.Name(), n) }
				if mode == "replays" {
					const hot = 1000
					for i := range hot { // store the responses first
						req, _ := http.NewRequest("POST", srv.URL, strings.NewReader(`{"amount":5000}`))
						req.Header.Set("Authorization", "Bearer bench")
						req.Header.Set("Idempotency-Key", fmt.Sprint("hot-", i))
						res, err := client.Do(req)
						if err != nil {
							b.Fatal(err)
						}
						res.Body.Close()
					}
					key = func(n int64) string { return fmt.Sprint("hot-", n%hot) }
				}
				lat := loadProxy(b, client, srv.URL, key)
				b.ReportMetric(float64(lat[0]-direct[0])/1e3, "added-p50-µs")
				b.ReportMetric(float64(lat[1]-direct[1])/1e3, "added-p99-µs")
			})
		}
	}
}

// loadProxy sends b.N keyed POSTs from 8 goroutines and reports req/s, p50 and
// p99; it returns the p50 and p99.
func loadProxy(b *testing.B, client *http.Client, url string, key func(int64) string) [2]time.Duration {
	var n atomic.Int64
	var mu sync.Mutex
	var all []time.Duration
	b.SetParallelism(4) // 8 goroutines on 2 cores
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var mine []time.Duration
		for pb.Next() {
			req, _ := http.NewRequest("POST", url, strings.NewReader(`{"amount":5000}`))
			req.Header.Set("Authorization", "Bearer bench") // the principal keys are scoped by
			req.Header.Set("Idempotency-Key", key(n.Add(1)))
			start := time.Now()
			res, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusCreated {
				b.Errorf("status %d", res.StatusCode)
				return
			}
			mine = append(mine, time.Since(start))
		}
		mu.Lock()
		all = append(all, mine...)
		mu.Unlock()
	})
	b.StopTimer()
	if len(all) == 0 {
		return [2]time.Duration{}
	}
	slices.Sort(all)
	p50, p99 := all[len(all)/2], all[len(all)*99/100]
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
	b.ReportMetric(float64(p50)/1e3, "p50-µs")
	b.ReportMetric(float64(p99)/1e3, "p99-µs")
	b.ReportMetric(0, "ns/op")
	return [2]time.Duration{p50, p99}
}

// servedStore opens the store of spec the way idem serve does, with serve's
// default response limit.
func servedStore(b *testing.B, spec string) keystore.Store {
	sp, err := parseStoreSpec(spec)
	if err != nil {
		b.Fatal(err)
	}
	s, err := openStore(b.Context(), sp, 1<<20+64<<10)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.close() })
	return s
}

// migratedSQLStore is a migrated SQL key store on the SQLite database db.
func migratedSQLStore(b *testing.B, db *sql.DB) keystore.Store {
	s, err := sqlstore.New(db, sqldialect.SQLite)
	if err == nil {
		err = s.Migrate(b.Context())
	}
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// benchRedisStore opens a store on the test Redis; without options it batches
// as idem serve's does.
func benchRedisStore(b *testing.B, opts ...redisstore.Option) keystore.Store {
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(b), PoolSize: 32})
	b.Cleanup(func() { rdb.Close() })
	s, err := redisstore.New(rdb, append([]redisstore.Option{redisstore.WithPrefix(testenv.Name("bench"))}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	return s
}
