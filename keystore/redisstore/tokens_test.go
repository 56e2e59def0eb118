package redisstore_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/redisstore"
)

// Redis restarts from a snapshot older than the latest tokens: the counter
// rolls back (it does not vanish), and the keys written after the
// snapshot are gone. Every token issued afterwards must still be above
// every token issued before, for the same key and for the bucket.
func TestTokensAfterOlderSnapshot(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartRedis(t, "--dbfilename", "dump.rdb")
	rdb := serverClient(t, srv)
	s, err := redisstore.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	var highest uint64
	take := func(key string, lease time.Duration) keystore.Claim {
		t.Helper()
		c, err := s.Reserve(ctx, key, nil, lease)
		if err != nil || c.State != keystore.Acquired {
			t.Fatalf("Reserve(%s): %+v %v", key, c, err)
		}
		if c.Token <= highest {
			t.Fatalf("token %d of %s is not above %d, issued earlier", c.Token, key, highest)
		}
		highest = c.Token
		return c
	}
	take("held", 300*time.Millisecond) // in the snapshot as an in-progress lease
	if err := rdb.Save(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(t.TempDir(), "old.rdb")
	if err := testenv.CopyFile(old, srv.RDB()); err != nil {
		t.Fatal(err)
	}
	// After the snapshot: the lease is taken over, keys come and go.
	time.Sleep(400 * time.Millisecond)
	take("held", time.Minute)
	for i := range 200 {
		c := take(fmt.Sprint("k", i%5), time.Minute)
		if err := s.Release(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := rdb.Save(ctx).Err(); err != nil { // make sure nothing newer is loaded
		t.Fatal(err)
	}
	srv.Kill()
	if err := testenv.CopyFile(srv.RDB(), old); err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, s.RedisKey("k0")).Val(); n != 0 {
		t.Fatal("the restore did not go back to the older snapshot")
	}
	time.Sleep(400 * time.Millisecond)
	// The restored lease of "held" (expired) is taken over, the other keys
	// are fresh: all above what was issued before the restart.
	take("held", time.Minute)
	for i := range 5 {
		take(fmt.Sprint("k", i), time.Minute)
	}
}

// A counter ahead of the clock (tokens issued faster than one per
// microsecond, or a clock stepped back) goes on from the counter; one
// behind it (rolled back, or of an earlier version that started it at the
// clock) jumps to the clock.
func TestTokenIsCounterOrClock(t *testing.T) {
	ctx := context.Background()
	rdb := client(t)
	s := newStore(t, rdb)
	ahead := uint64(time.Now().Add(time.Hour).UnixMicro())
	rdb.Set(ctx, s.CounterKey("a"), ahead, 0)
	c, err := s.Reserve(ctx, "a", nil, time.Minute)
	if err != nil || c.Token != ahead+1 {
		t.Fatalf("counter ahead of the clock: token %d, %v; want %d", c.Token, err, ahead+1)
	}
	rdb.Set(ctx, s.CounterKey("b"), 41, 0)
	before := uint64(time.Now().UnixMicro())
	c, err = s.Reserve(ctx, "b", nil, time.Minute)
	if err != nil || c.Token < before-1_000_000 {
		t.Fatalf("counter behind the clock: token %d, %v; want about %d", c.Token, err, before)
	}
	if v, _ := rdb.Get(ctx, s.CounterKey("b")).Uint64(); v != c.Token {
		t.Fatalf("counter %d after issuing %d", v, c.Token)
	}
}

// The memory a done key costs Redis (empty result, no fingerprint, the
// default scope), for `idem plan`: used_memory before and after 10,000
// keys on a server of its own.
func TestBytesPerDoneKey(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartRedis(t)
	rdb := serverClient(t, srv)
	for _, buckets := range []int{1, 64} {
		rdb.FlushAll(ctx)
		s, err := redisstore.New(rdb, redisstore.WithBuckets(buckets), redisstore.WithScope("orders"))
		if err != nil {
			t.Fatal(err)
		}
		used := func() int64 {
			info := rdb.Info(ctx, "memory").Val()
			var n int64
			for _, l := range strings.Split(info, "\n") {
				if _, err := fmt.Sscanf(l, "used_memory:%d", &n); err == nil {
					return n
				}
			}
			t.Fatal("no used_memory")
			return 0
		}
		const keys = 10000
		m0 := used()
		for i := range keys {
			key := fmt.Sprintf("0190c3a4-7b2e-7c41-9d3e-%012d", i) // 36-char UUID-shaped keys
			c, err := s.Reserve(ctx, key, nil, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Complete(ctx, c, nil, time.Hour); err != nil {
				t.Fatal(err)
			}
		}
		per := float64(used()-m0) / keys
		t.Logf("buckets=%d: %.1f B per done key (36-char keys, empty result)", buckets, per)
		if per > 400 {
			t.Errorf("%.1f B per done key", per)
		}
	}
}
