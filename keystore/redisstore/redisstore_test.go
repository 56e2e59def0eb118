package redisstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/redisstore"
	"github.com/idem-go/idem/keystore/storetest"
)

func TestMain(m *testing.M) {
	code := testenv.Main(m)
	if err := goleak.Find(); code == 0 && err != nil {
		fmt.Fprintln(os.Stderr, "goleak:", err)
		code = 1
	}
	os.Exit(code)
}

// client returns a client of the test Redis, closed when t ends.
func client(t testing.TB, opts ...func(*redis.Options)) *redis.Client {
	o := &redis.Options{Addr: testenv.RedisAddr(t)}
	for _, f := range opts {
		f(o)
	}
	rdb := redis.NewClient(o)
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// serverClient returns a client of srv alone, closed when t ends.
func serverClient(t testing.TB, srv *testenv.RedisServer) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

func newStore(t testing.TB, rdb redis.UniversalClient, opts ...redisstore.Option) *redisstore.Store {
	s, err := redisstore.New(rdb, append([]redisstore.Option{redisstore.WithPrefix(testenv.Name("t_") + ":")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) keystore.Store { return newStore(t, client(t)) })
}

// With one round trip in flight, the suite's concurrent calls (64 goroutines
// on one key, the linearizability histories) queue and share pipelines.
func TestConformanceOneInFlight(t *testing.T) {
	storetest.Run(t, func(t *testing.T) keystore.Store {
		return newStore(t, client(t), redisstore.WithMaxInFlight(1))
	})
}

// Every call on its own connection round trip, as plain go-redis calls.
func TestConformanceUnbatched(t *testing.T) {
	storetest.Run(t, func(t *testing.T) keystore.Store {
		return newStore(t, client(t), redisstore.WithMaxInFlight(0))
	})
}

// On go-redis's AutoPipeliner, which batches by itself.
func TestConformanceAutoPipeline(t *testing.T) {
	storetest.Run(t, func(t *testing.T) keystore.Store {
		ap, err := client(t).AutoPipeline()
		if err != nil {
			t.Fatal(err)
		}
		return newStore(t, ap)
	})
}

// After SCRIPT FLUSH (as after a restart or a failover) every operation
// loads its script again, also when the calls share a pipeline.
func TestScriptsFlushed(t *testing.T) {
	ctx := context.Background()
	rdb := client(t)
	s := newStore(t, rdb, redisstore.WithMaxInFlight(1))
	var wg sync.WaitGroup
	for round := range 3 {
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		for g := range 16 {
			wg.Go(func() {
				key := fmt.Sprintf("r%d-g%d", round, g)
				c, err := s.Reserve(ctx, key, nil, time.Minute)
				if err != nil || c.State != keystore.Acquired {
					t.Errorf("reserve %s: %+v %v", key, c, err)
					return
				}
				if g%2 == 0 {
					err = s.Complete(ctx, c, []byte("ok"), time.Minute)
				} else {
					err = s.Release(ctx, c)
				}
				if err != nil {
					t.Errorf("%s: %v", key, err)
				}
			})
		}
		wg.Wait()
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		// Complete and Release alone, each the first script after a flush.
		c, err := s.Reserve(ctx, fmt.Sprintf("alone-%d", round), nil, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		rdb.ScriptFlush(ctx)
		if round%2 == 0 {
			err = s.Complete(ctx, c, nil, time.Minute)
		} else {
			err = s.Release(ctx, c)
		}
		if err != nil {
			t.Fatalf("after a flush: %v", err)
		}
	}
}

func TestOptions(t *testing.T) {
	rdb := client(t)
	for _, o := range []redisstore.Option{
		redisstore.WithPrefix("a{b"), redisstore.WithPrefix(string(make([]byte, 65))),
		redisstore.WithScope(""), redisstore.WithScope("a}"), redisstore.WithMaxResultSize(-1),
		redisstore.WithMaxInFlight(-1),
	} {
		if _, err := redisstore.New(rdb, o); !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("New: %v, want ErrInvalidOption", err)
		}
	}
	if _, err := redisstore.New(nil); !errors.Is(err, idem.ErrInvalidOption) {
		t.Errorf("New(nil): %v", err)
	}
}

// Every key the store writes has an expiry; a lease's record outlives the
// lease by a grace period, to report takeovers.
func TestKeysAlwaysExpire(t *testing.T) {
	ctx := context.Background()
	rdb := client(t)
	s := newStore(t, rdb)
	c, err := s.Reserve(ctx, "k", []byte("fp"), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ttl := rdb.PTTL(ctx, s.RedisKey("k")).Val()
	if ttl <= 69*time.Second || ttl > 70*time.Second {
		t.Fatalf("lease record PTTL %v, want 10s lease + 60s grace", ttl)
	}
	if err := s.Complete(ctx, c, []byte("r"), time.Hour); err != nil {
		t.Fatal(err)
	}
	if ttl := rdb.PTTL(ctx, s.RedisKey("k")).Val(); ttl <= 59*time.Minute || ttl > time.Hour {
		t.Fatalf("result PTTL %v, want about 1h", ttl)
	}
	// The done record is six MessagePack values: state 2, the token, the
	// expiry, an empty nonce, the fingerprint and the result.
	v := rdb.Get(ctx, s.RedisKey("k")).Val()
	if len(v) < 8 || v[0] != 0x02 || !strings.HasSuffix(v, "\xa0\xa2fp\xa1r") {
		t.Fatalf("done record %q", v)
	}
}

func TestScopesShareOneSlot(t *testing.T) {
	s := newStore(t, client(t))
	v, err := s.Scope("tenant-7")
	if err != nil {
		t.Fatal(err)
	}
	a, b := v.(*redisstore.Store).RedisKey("x"), v.(*redisstore.Store).RedisKey("other{y}")
	if !bytes.Contains([]byte(a), []byte("{tenant-7}:")) || !bytes.Contains([]byte(b), []byte("{tenant-7}:")) {
		t.Fatalf("keys %q, %q do not carry the scope as hash tag", a, b)
	}
}

func TestRedisDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	s := newStore(t, client(t, func(o *redis.Options) { o.Addr, o.MaxRetries, o.DialTimeout = addr, -1, 200*time.Millisecond }))
	_, err = s.Reserve(context.Background(), "k", nil, time.Minute)
	if err == nil {
		t.Fatal("Reserve with Redis down succeeded")
	}
	t.Logf("Reserve with Redis down: %v", err)
}

// cutProxy forwards connections to Redis, but cuts the first connection that
// sends a script (or, armed with armBatch, at least min scripts in one
// write: a pipeline) after forwarding it: the scripts run, their replies are
// lost.
type cutProxy struct {
	l     net.Listener
	to    string
	mu    sync.Mutex
	armed bool
	min   int // scripts in one write that trigger the cut
	wg    sync.WaitGroup
}

func newCutProxy(t *testing.T, to string) *cutProxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{l: l, to: to}
	p.wg.Go(p.accept)
	t.Cleanup(func() { l.Close(); p.wg.Wait() })
	return p
}

func (p *cutProxy) arm() { p.armBatch(1) }

func (p *cutProxy) armBatch(min int) { p.mu.Lock(); p.armed, p.min = true, min; p.mu.Unlock() }

func (p *cutProxy) accept() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.to)
		if err != nil {
			c.Close()
			continue
		}
		var mute atomic.Bool // set before a script is forwarded whose reply must be lost
		p.wg.Go(func() {
			defer c.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := up.Read(buf)
				if n > 0 && !mute.Load() {
					if _, werr := c.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		})
		p.wg.Go(func() {
			defer up.Close()
			defer c.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					p.mu.Lock()
					cut := p.armed && bytes.Count(bytes.ToLower(buf[:n]), []byte("evalsha")) >= p.min
					if cut {
						p.armed = false
						mute.Store(true)
					}
					p.mu.Unlock()
					if _, werr := up.Write(buf[:n]); werr != nil {
						return
					}
					if cut {
						time.Sleep(50 * time.Millisecond) // Redis runs the script; its reply is dropped
						return
					}
				}
				if err != nil {
					return
				}
			}
		})
	}
}

// The connection drops after Redis ran Reserve: the caller gets an error, the
// key is held by nobody who knows it, and it becomes reservable when the
// lease expires: nothing blocks a retry forever.
func TestReplyLostAfterReserve(t *testing.T) {
	ctx := context.Background()
	direct, cut, p := aroundCut(t, func(o *redis.Options) { o.MaxRetries = -1 })
	p.arm()
	const lease = 300 * time.Millisecond
	if _, err := cut.Reserve(ctx, "k", nil, lease); err == nil {
		t.Fatal("Reserve whose reply was cut succeeded")
	}
	c, err := direct.Reserve(ctx, "k", nil, time.Minute)
	if err != nil || c.State != keystore.InProgress {
		t.Fatalf("right after the cut: %+v %v, want in progress (the script ran)", c, err)
	}
	time.Sleep(lease + 100*time.Millisecond)
	c, err = direct.Reserve(ctx, "k", nil, time.Minute)
	if err != nil || c.State != keystore.Acquired || !c.Takeover {
		t.Fatalf("after the lease: %+v %v, want a takeover", c, err)
	}
}

// With go-redis's default retries, the retried Reserve recognises its own
// lease by its nonce and answers Acquired.
func TestRetriedReserveIsIdempotent(t *testing.T) {
	ctx := context.Background()
	direct, cut, p := aroundCut(t, func(*redis.Options) {})
	p.arm()
	c, err := cut.Reserve(ctx, "k", nil, time.Minute)
	if err != nil || c.State != keystore.Acquired {
		t.Fatalf("retried Reserve: %+v %v, want acquired", c, err)
	}
	if err := cut.Complete(ctx, c, []byte("ok"), time.Minute); err != nil {
		t.Fatal(err)
	}
	if d, _ := direct.Reserve(ctx, "k", nil, time.Minute); string(d.Result) != "ok" {
		t.Fatalf("result %+v", d)
	}
}

// aroundCut returns a store on the test Redis, with its scripts loaded, and
// a store on the same keys whose client (options changed by setOpts) reaches
// Redis through a cutProxy.
func aroundCut(t *testing.T, setOpts func(*redis.Options), opts ...redisstore.Option) (direct, cut *redisstore.Store, p *cutProxy) {
	t.Helper()
	direct = newStore(t, client(t))
	if _, err := direct.Reserve(context.Background(), "warm-up", nil, time.Second); err != nil { // loads the script
		t.Fatal(err)
	}
	p = newCutProxy(t, testenv.RedisAddr(t))
	rdb := client(t, func(o *redis.Options) { o.Addr = p.l.Addr().String(); setOpts(o) })
	cut, err := redisstore.New(rdb, append([]redisstore.Option{redisstore.WithPrefix(prefixOf(direct))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return direct, cut, p
}

// prefixOf recovers a store's prefix from its Redis key layout.
func prefixOf(s keystore.Store) string {
	k := s.(*redisstore.Store).RedisKey("")
	return k[:bytes.IndexByte([]byte(k), '{')]
}

// The connection drops after Redis ran a whole pipeline of Reserves: go-redis
// sends the pipeline again, every script recognises its caller's lease by
// the nonce, and each caller holds its key exactly once.
func TestRetriedPipelineIsIdempotent(t *testing.T) {
	ctx := context.Background()
	direct, cut, p := aroundCut(t, func(*redis.Options) {}, redisstore.WithMaxInFlight(1))
	p.armBatch(4)
	var wg sync.WaitGroup
	for round := 0; ; round++ {
		for g := range 32 {
			wg.Go(func() {
				key := fmt.Sprintf("r%d-g%d", round, g)
				c, err := cut.Reserve(ctx, key, []byte("fp"), time.Minute)
				if err != nil || c.State != keystore.Acquired {
					t.Errorf("reserve %s: %+v %v, want acquired", key, c, err)
					return
				}
				if err := cut.Complete(ctx, c, []byte(key), time.Minute); err != nil {
					t.Errorf("complete %s: %v", key, err)
				}
			})
		}
		wg.Wait()
		p.mu.Lock()
		fired := !p.armed
		p.mu.Unlock()
		if fired || t.Failed() {
			break
		}
		if round == 20 {
			t.Fatal("no pipeline of 4 scripts in 20 rounds of 32 concurrent calls")
		}
	}
	if t.Failed() {
		return
	}
	// Every key holds its own caller's result.
	iter := 0
	for round := 0; ; round++ {
		c, err := direct.Reserve(ctx, fmt.Sprintf("r%d-g0", round), nil, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if c.State == keystore.Acquired {
			break
		}
		for g := range 32 {
			key := fmt.Sprintf("r%d-g%d", round, g)
			d, err := direct.Reserve(ctx, key, []byte("fp"), time.Minute)
			if err != nil || d.State != keystore.Done || string(d.Result) != key {
				t.Fatalf("%s afterwards: %+v %v, want done with its own result", key, d, err)
			}
			iter++
		}
	}
	t.Logf("%d keys checked", iter)
}
