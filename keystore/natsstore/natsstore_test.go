package natsstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/testsupport/natsenv"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/natsstore"
	"github.com/idem-go/idem/keystore/storetest"
)

// newStore returns a store on a bucket of its own, replicated over the
// shared cluster's three servers.
func newStore(t testing.TB, opts ...natsstore.Option) *natsstore.Store {
	t.Helper()
	_, js := natsenv.Shared(t).Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := natsstore.New(ctx, js, append([]natsstore.Option{natsstore.WithBucket(testenv.Name("t_")), natsstore.WithReplicas(3)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// R3 buckets on a 3-server cluster. Result TTLs are whole seconds, so the
// expiry tests use a unit of a second.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) keystore.Store { return newStore(t) }, storetest.WithTimeUnit(time.Second))
}

func TestOptions(t *testing.T) {
	_, js := natsenv.Shared(t).Connect(t)
	ctx := context.Background()
	for _, o := range []natsstore.Option{
		natsstore.WithBucket(""), natsstore.WithBucket("a.b"), natsstore.WithReplicas(0), natsstore.WithReplicas(6),
		natsstore.WithScope(""), natsstore.WithScope("a}"), natsstore.WithMaxResultSize(-1), natsstore.WithMaxResultSize(64 << 20),
		natsstore.WithTimeout(0),
	} {
		if _, err := natsstore.New(ctx, js, o); !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("New: %v, want ErrInvalidOption", err)
		}
	}
	if _, err := natsstore.New(ctx, nil); !errors.Is(err, idem.ErrInvalidOption) {
		t.Errorf("New(nil): %v", err)
	}
}

// The lease message lives on for a grace period after the lease, so that
// its successor reports the takeover, and a result is a message whose TTL
// the server counts.
func TestRecordsExpireOnTheServer(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	c, err := s.Reserve(ctx, "k", nil, 1500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, c, []byte("r"), time.Second); err != nil {
		t.Fatal(err)
	}
	if d, _ := s.Reserve(ctx, "k", nil, time.Minute); d.State != keystore.Done {
		t.Fatalf("right after Complete: %+v", d)
	}
	time.Sleep(2500 * time.Millisecond)
	d, err := s.Reserve(ctx, "k", nil, time.Minute)
	if err != nil || d.State != keystore.Acquired || d.Takeover || d.Token <= c.Token {
		t.Fatalf("after the result's TTL: %+v %v, want a fresh claim with a higher token", d, err)
	}
}

func TestOpenURL(t *testing.T) {
	c := natsenv.Shared(t)
	ctx := context.Background()
	s, nc, err := natsstore.OpenURL(ctx, "nats://"+c.Nodes()[0].Addr()+","+c.Nodes()[1].Addr()+"?bucket="+testenv.Name("u_")+"&replicas=3&timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if cl, err := s.Reserve(ctx, "k", nil, time.Minute); err != nil || cl.State != keystore.Acquired {
		t.Fatalf("Reserve: %+v %v", cl, err)
	}
	for _, bad := range []string{"redis://x:1", "nats://", "nats://h:1?replicas=x", "nats://h:1?nope=1", "nats://h:1/path", "nats://h:1?bucket=a&bucket=b"} {
		if _, _, err := natsstore.OpenURL(ctx, bad); !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("OpenURL(%q): %v, want ErrInvalidOption", bad, err)
		}
	}
}

// kill -9 of the stream leader under load: JetStream elects another
// server among the two that hold every acknowledged write, so nothing
// acknowledged is lost, no effect runs twice and tokens (stream
// sequences) keep increasing. Calls fail during the election.
func TestLeaderKilled(t *testing.T) {
	ctx := context.Background()
	c := natsenv.Start(t)
	_, js := c.Connect(t)
	s, err := natsstore.New(ctx, js, natsstore.WithBucket("failover"), natsstore.WithReplicas(3), natsstore.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	load := testenv.StartKeyLoad(s, "load", 8, 2*time.Second, nil)
	time.Sleep(testenv.Soak(t))
	info := natsenv.StreamInfo(ctx, js, "KV_failover")
	victim := c.WaitLeader(t, 30*time.Second, "KV_failover", "", info)
	load.Mark()
	victim.Kill()
	t.Logf("killed stream leader %s with %d keys acknowledged", victim.Name(), load.Acked())
	c.WaitLeader(t, 30*time.Second, "KV_failover", victim.Name(), info)
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(testenv.Soak(t) + time.Second)
	load.Stop()
	r, err := load.Verify(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", r)
	if r.Lost != 0 || r.Doubled != 0 || r.Regressions != 0 {
		t.Errorf("leader kill: %d lost, %d doubled, %d token regressions; want 0", r.Lost, r.Doubled, r.Regressions)
	}
	if r.Acked == 0 {
		t.Error("no key acknowledged")
	}
}

// What a done key costs the stream (file storage, per replica), for `idem
// plan`: the stream's bytes per message after 500 done keys.
func TestBytesPerDoneKey(t *testing.T) {
	ctx := context.Background()
	_, js := natsenv.Shared(t).Connect(t)
	bucket := testenv.Name("b_")
	s, err := natsstore.New(ctx, js, natsstore.WithBucket(bucket), natsstore.WithReplicas(3), natsstore.WithScope("orders"))
	if err != nil {
		t.Fatal(err)
	}
	const keys = 500
	for i := range keys {
		key := fmt.Sprintf("0190c3a4-7b2e-7c41-9d3e-%012d", i)
		c, err := s.Reserve(ctx, key, nil, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Complete(ctx, c, nil, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	st, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	state := st.CachedInfo().State
	if state.Msgs != keys {
		t.Fatalf("%d messages for %d done keys", state.Msgs, keys)
	}
	t.Logf("%.1f B per done key per replica (stream bytes / messages; 36-char keys, empty result)", float64(state.Bytes)/float64(state.Msgs))
}
