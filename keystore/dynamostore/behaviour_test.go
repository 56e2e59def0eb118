package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/dynamostore"
	"github.com/idem-go/idem/keystore/storetest"
)

// TestConformance runs the suite on dynalite, which does not return the item
// with a failed condition: conflicts take the store's read-after path.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) keystore.Store {
		c, _ := client(t, "")
		return newStore(t, c, dynamostore.WithClockSkew(0))
	})
}

// TestConformanceOldItem runs the suite through a proxy that returns the
// item with a failed condition, as DynamoDB does for
// ReturnValuesOnConditionCheckFailure ALL_OLD, so that conflicts take the
// one-request path; with the default skew margin of a second, and so a
// time unit of a second.
func TestConformanceOldItem(t *testing.T) {
	p := newProxy(t)
	p.oldItem.Store(true)
	storetest.Run(t, func(t *testing.T) keystore.Store {
		c, _ := client(t, p.srv.URL)
		return newStore(t, c)
	}, storetest.WithTimeUnit(time.Second))
}

// clock is a settable clock for WithClock.
type clock struct{ off atomic.Int64 }

func (c *clock) now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *clock) advance(d time.Duration) { c.off.Add(int64(d)) }

// rawItem reads key's item as stored.
func rawItem(t *testing.T, api *dynamodb.Client, s *dynamostore.Store, key string) map[string]types.AttributeValue {
	t.Helper()
	out, err := api.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(s.Table()), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: s.PartitionKey(key)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

func attrN(m map[string]types.AttributeValue, name string) string {
	if v, ok := m[name].(*types.AttributeValueMemberN); ok {
		return v.Value
	}
	return ""
}

// TestRoundTrips counts the HTTP requests of every call: one each, on the
// acquiring paths and the conflict paths alike, when the server returns the
// item with a failed condition (DynamoDB); on dynalite, which does not, the
// conflict paths cost one GetItem more. A result over the limit and bad
// input cost none.
func TestRoundTrips(t *testing.T) {
	p := newProxy(t)
	p.oldItem.Store(true)
	for _, tc := range []struct {
		name     string
		endpoint string
		conflict map[string]int // requests of a call that meets a live key or a stale token
	}{
		{"DynamoDB", p.srv.URL, map[string]int{"UpdateItem": 1}},
		{"dynalite", "", map[string]int{"UpdateItem": 1, "GetItem": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api, cnt := client(t, tc.endpoint)
			clk := &clock{}
			s := newStore(t, api, dynamostore.WithClock(clk.now))
			ctx := context.Background()
			one := map[string]int{"UpdateItem": 1}
			step := func(what string, want map[string]int) {
				t.Helper()
				if got := cnt.take(); !maps.Equal(got, want) {
					t.Errorf("%s: requests %v, want %v", what, got, want)
				}
			}
			cnt.take() // Migrate's
			c, err := s.Reserve(ctx, "k", []byte("fp"), time.Minute)
			if err != nil || c.State != keystore.Acquired {
				t.Fatalf("Reserve: %+v %v", c, err)
			}
			step("Reserve of a new key", one)
			if r, err := s.Reserve(ctx, "k", []byte("fp"), time.Minute); err != nil || r.State != keystore.InProgress {
				t.Fatalf("Reserve: %+v %v", r, err)
			}
			step("Reserve of a key in progress", tc.conflict)
			if _, err := s.Reserve(ctx, "k", []byte("other"), time.Minute); !errors.Is(err, idem.ErrFingerprintMismatch) {
				t.Fatalf("Reserve with another fingerprint: %v", err)
			}
			step("Reserve with another fingerprint", tc.conflict)
			if c, err = s.Extend(ctx, c, 2*time.Minute); err != nil {
				t.Fatal(err)
			}
			step("Extend", one)
			if err := s.Complete(ctx, c, make([]byte, s.MaxResultSize()+1), time.Hour); !errors.Is(err, keystore.ErrResultTooLarge) {
				t.Fatalf("Complete with a result over the limit: %v", err)
			}
			step("Complete with a result over the limit", map[string]int{})
			if err := s.Complete(ctx, c, []byte("ok"), time.Hour); err != nil {
				t.Fatal(err)
			}
			step("Complete", one)
			if err := s.Complete(ctx, c, []byte("again"), time.Hour); err != nil {
				t.Fatal(err)
			}
			step("Complete repeated", tc.conflict)
			if r, err := s.Reserve(ctx, "k", nil, time.Minute); err != nil || r.State != keystore.Done || string(r.Result) != "ok" {
				t.Fatalf("Reserve: %+v %v", r, err)
			}
			step("Reserve of a done key", tc.conflict)

			c2, _ := s.Reserve(ctx, "k2", nil, time.Minute)
			cnt.take()
			if err := s.Release(ctx, c2); err != nil {
				t.Fatal(err)
			}
			step("Release", one)
			c3, err := s.Reserve(ctx, "k2", nil, time.Minute)
			if err != nil || c3.State != keystore.Acquired {
				t.Fatalf("Reserve after Release: %+v %v", c3, err)
			}
			step("Reserve of a released key", one)
			clk.advance(3 * time.Minute)
			c4, err := s.Reserve(ctx, "k2", nil, time.Minute)
			if err != nil || !c4.Takeover || c4.Token <= c3.Token {
				t.Fatalf("takeover: %+v %v", c4, err)
			}
			step("Reserve taking over a lapsed lease", one)
			if err := s.Complete(ctx, c3, nil, time.Hour); !errors.Is(err, keystore.ErrLeaseLost) {
				t.Fatalf("stale Complete: %v", err)
			}
			step("stale Complete", tc.conflict)
		})
	}
}

// TestConcurrentReserve: 64 goroutines, on 64 stores over 4 clients, reserve
// one key at once: exactly one acquires, the others see it in progress.
func TestConcurrentReserve(t *testing.T) {
	api, _ := client(t, "")
	first := newStore(t, api)
	var stores []*dynamostore.Store
	for i := range 64 {
		c := api
		if i%4 != 0 {
			c, _ = client(t, "")
		}
		s, err := dynamostore.New(c, first.Table())
		if err != nil {
			t.Fatal(err)
		}
		stores = append(stores, s)
	}
	var acquired, inProgress atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, s := range stores {
		wg.Go(func() {
			<-start
			c, err := s.Reserve(context.Background(), "one", nil, time.Minute)
			switch {
			case err != nil:
				t.Error(err)
			case c.State == keystore.Acquired:
				acquired.Add(1)
			case c.State == keystore.InProgress:
				inProgress.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	if acquired.Load() != 1 || inProgress.Load() != 63 {
		t.Fatalf("64 concurrent Reserves: %d acquired, %d in progress; want 1 and 63", acquired.Load(), inProgress.Load())
	}
}

// TestRepeatedRelease: a Release repeated before the key is reserved again
// (a client's retry of one whose answer was lost) finds the item released
// under its own token and returns nil, as keystore.Store documents; once
// the key is reserved anew, the old token's Release is ErrLeaseLost and
// leaves the new claim in place.
func TestRepeatedRelease(t *testing.T) {
	api, _ := client(t, "")
	s := newStore(t, api)
	ctx := context.Background()
	first, err := s.Reserve(ctx, "pay-rel", nil, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := s.Release(ctx, first); err != nil {
			t.Fatalf("Release %d of the same claim: %v, want nil", i+1, err)
		}
	}
	next, err := s.Reserve(ctx, "pay-rel", nil, time.Minute)
	if err != nil || next.State != keystore.Acquired || next.Token <= first.Token {
		t.Fatalf("Reserve after the releases: %+v %v; want acquired with a token above %d", next, err, first.Token)
	}
	if err := s.Release(ctx, first); !errors.Is(err, keystore.ErrLeaseLost) {
		t.Fatalf("Release of the first claim after a new Reserve: %v, want ErrLeaseLost", err)
	}
	if it := rawItem(t, api, s, "pay-rel"); attrN(it, "tok") != fmt.Sprint(next.Token) || attrN(it, "st") != "1" {
		t.Fatalf("after the stale Release the item is %v: want token %d, in progress", it, next.Token)
	}
}

// TestTakeoverAndStaleComplete: a lease lapses (by the store's clock, moved
// ahead), a second holder takes the key over with a higher token, and the
// first holder's late Complete is ErrLeaseLost and writes nothing: the item
// still holds the second holder's token, in progress, with no result.
func TestTakeoverAndStaleComplete(t *testing.T) {
	api, _ := client(t, "")
	clk := &clock{}
	s := newStore(t, api, dynamostore.WithClock(clk.now))
	ctx := context.Background()
	old, err := s.Reserve(ctx, "pay-1", nil, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	clk.advance(30*time.Second + dynamostore.DefaultClockSkew + time.Millisecond)
	cur, err := s.Reserve(ctx, "pay-1", nil, time.Minute)
	if err != nil || cur.State != keystore.Acquired || !cur.Takeover || cur.Token <= old.Token {
		t.Fatalf("takeover: %+v %v; want acquired, takeover, token above %d", cur, err, old.Token)
	}
	if err := s.Complete(ctx, old, []byte("stale"), time.Hour); !errors.Is(err, keystore.ErrLeaseLost) {
		t.Fatalf("stale Complete: %v, want ErrLeaseLost", err)
	}
	if err := s.Release(ctx, old); !errors.Is(err, keystore.ErrLeaseLost) {
		t.Fatalf("stale Release: %v, want ErrLeaseLost", err)
	}
	if _, err := s.Extend(ctx, old, time.Hour); !errors.Is(err, keystore.ErrLeaseLost) {
		t.Fatalf("stale Extend: %v, want ErrLeaseLost", err)
	}
	it := rawItem(t, api, s, "pay-1")
	if attrN(it, "tok") != fmt.Sprint(cur.Token) || attrN(it, "st") != "1" || it["res"] != nil {
		t.Fatalf("after the stale calls the item is %v: want token %d, in progress, no result", it, cur.Token)
	}
	if err := s.Complete(ctx, cur, []byte("fresh"), time.Hour); err != nil {
		t.Fatal(err)
	}
	if r, _ := s.Reserve(ctx, "pay-1", nil, time.Minute); string(r.Result) != "fresh" {
		t.Fatalf("result %q, want %q", r.Result, "fresh")
	}
}

// TestClockSkew: host B's clock is 12 s ahead of host A's, and A holds a
// 10 s lease. With a skew margin above the skew (15 s), B does not take the
// lease before A's clock says it ended; with no margin, B takes it over at
// once, while A still holds it by its own clock: the hazard the margin is
// for. Fencing still refuses A's late Complete.
func TestClockSkew(t *testing.T) {
	api, _ := client(t, "")
	ctx := context.Background()
	a := &clock{}
	b := &clock{}
	b.advance(12 * time.Second)
	const margin = 15 * time.Second
	sa := newStore(t, api, dynamostore.WithClock(a.now), dynamostore.WithClockSkew(margin))
	safe, err := dynamostore.New(api, sa.Table(), dynamostore.WithClock(b.now), dynamostore.WithClockSkew(margin))
	if err != nil {
		t.Fatal(err)
	}
	unsafe, err := dynamostore.New(api, sa.Table(), dynamostore.WithClock(b.now), dynamostore.WithClockSkew(0))
	if err != nil {
		t.Fatal(err)
	}
	held, err := sa.Reserve(ctx, "k", nil, 10*time.Second) // ends at A's now + 10 s = B's now − 2 s
	if err != nil || held.State != keystore.Acquired {
		t.Fatalf("%+v %v", held, err)
	}
	if c, err := safe.Reserve(ctx, "k", nil, time.Minute); err != nil || c.State != keystore.InProgress || !c.Expires.Equal(held.Expires) {
		t.Fatalf("B with a 15 s margin: %+v %v; want in progress until %v", c, err, held.Expires)
	}
	c, err := unsafe.Reserve(ctx, "k", nil, time.Minute)
	if err != nil || c.State != keystore.Acquired || !c.Takeover {
		t.Fatalf("B with no margin: %+v %v; want a takeover (early, by A's clock)", c, err)
	}
	if !a.now().Before(held.Expires) {
		t.Fatal("test too slow: A's lease ended by A's clock before B took it over")
	}
	if err := sa.Complete(ctx, held, nil, time.Hour); !errors.Is(err, keystore.ErrLeaseLost) {
		t.Fatalf("A's Complete after B's early takeover: %v", err)
	}

	// With the margin, B takes over once its clock is past the end plus 15 s.
	held2, _ := sa.Reserve(ctx, "k2", nil, 10*time.Second)
	b.advance(13*time.Second + time.Millisecond) // B's now ≥ A's end + 15 s + 1 ms
	if c, err := safe.Reserve(ctx, "k2", nil, time.Minute); err != nil || c.State != keystore.Acquired || c.Token <= held2.Token {
		t.Fatalf("B past the end plus the margin: %+v %v; want acquired above %d", c, err, held2.Token)
	}
}

// TestThrottling: a proxy answers every request with
// ProvisionedThroughputExceededException for a while. Each call is retried by
// the SDK's retryer (3 attempts) and then fails closed: an error, not an
// outcome, and nothing written; once the throttling ends, calls succeed.
func TestThrottling(t *testing.T) {
	p := newProxy(t)
	api, _ := client(t, p.srv.URL)
	s := newStore(t, api)
	ctx := context.Background()
	var tpe *types.ProvisionedThroughputExceededException

	p.throttle.Store(1 << 30)
	p.hits.Store(0)
	if c, err := s.Reserve(ctx, "k", nil, time.Minute); !errors.As(err, &tpe) || !strings.HasPrefix(err.Error(), "dynamostore: reserve:") {
		t.Fatalf("throttled Reserve: %+v, %v; want an error wrapping ProvisionedThroughputExceededException", c, err)
	}
	if n := p.hits.Load(); n != 3 {
		t.Fatalf("throttled Reserve sent %d requests, want 3 (the standard retryer's attempts)", n)
	}
	p.throttle.Store(0)
	c, err := s.Reserve(ctx, "k", nil, time.Minute)
	if err != nil || c.State != keystore.Acquired || c.Takeover {
		t.Fatalf("Reserve after throttling: %+v %v; want acquired, the key untouched by the throttled call", c, err)
	}

	p.throttle.Store(1 << 30)
	if err := s.Complete(ctx, c, []byte("r"), time.Hour); !errors.As(err, &tpe) {
		t.Fatalf("throttled Complete: %v", err)
	}
	if err := s.Release(ctx, c); !errors.As(err, &tpe) {
		t.Fatalf("throttled Release: %v", err)
	}
	// Throttling for two attempts only: the third succeeds within one call.
	p.throttle.Store(2)
	if r, err := s.Reserve(ctx, "k", nil, time.Minute); err != nil || r.State != keystore.InProgress {
		t.Fatalf("Reserve through two throttled attempts: %+v %v; want in progress (the throttled Complete wrote nothing)", r, err)
	}
	if err := s.Complete(ctx, c, []byte("r"), time.Hour); err != nil {
		t.Fatal(err)
	}
	// Do fails closed too: fn does not run while the store cannot answer.
	p.throttle.Store(1 << 30)
	_, _, err = keystore.Do(ctx, s, "do", nil, func(context.Context) ([]byte, error) {
		t.Error("fn ran while the store was throttled")
		return nil, nil
	}, keystore.WithLease(time.Minute))
	if !errors.As(err, &tpe) {
		t.Fatalf("throttled Do: %v", err)
	}
	p.throttle.Store(0)
}
