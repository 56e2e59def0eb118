package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/redisstore"
	"github.com/idem-go/idem/keystore/storetest"
)

// numSub is the number of subscribers of channel ch on rdb's server.
func numSub(t *testing.T, rdb *redis.Client, ch string) int64 {
	n, err := rdb.PubSubNumSub(context.Background(), ch).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n[ch]
}

// TestNotifyResubscribes: a waiter whose subscription connection is
// killed is subscribed again (go-redis reconnects) and woken by the
// Complete that follows, long before its poll; once it returns, the store
// holds no subscription.
func TestNotifyResubscribes(t *testing.T) {
	srv := testenv.StartRedis(t)
	rdb := serverClient(t, srv)
	st := newStore(t, rdb)
	s := &storetest.Counted{Store: st}
	ctx := context.Background()
	holder, err := st.Reserve(ctx, "k", nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	type answer struct {
		c   keystore.Claim
		err error
	}
	done := make(chan answer, 1)
	go func() {
		c, err := keystore.Await(ctx, s, "k", nil, time.Hour, keystore.Wait{Min: time.Hour, Max: time.Hour})
		done <- answer{c, err}
	}()
	ch := st.RedisKey("k")
	testenv.WaitFor(t, time.Minute, "the subscription", func() bool { return numSub(t, rdb, ch) == 1 && s.Reserves() >= 2 })
	if err := rdb.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	// The reconnection wakes the waiter (messages may have been lost), which
	// reserves once more and sleeps again.
	testenv.WaitFor(t, time.Minute, "the subscription again", func() bool { return numSub(t, rdb, ch) == 1 && s.Reserves() >= 3 })
	start := time.Now()
	if err := st.Complete(ctx, holder, []byte("r"), time.Hour); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if a.err != nil || a.c.State != keystore.Done || string(a.c.Result) != "r" {
		t.Fatalf("Await: %v %q %v", a.c.State, a.c.Result, a.err)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("answered %v after Complete: not woken by the notification", took)
	}
	testenv.WaitFor(t, time.Minute, "the subscription closed", func() bool { return redisstore.Subscriptions(st) == 0 })
}

// TestNotifyMissedPolls: a change that publishes nothing (the key deleted
// behind the store's back) is found by the poll.
func TestNotifyMissedPolls(t *testing.T) {
	rdb := client(t)
	st := newStore(t, rdb)
	s := &storetest.Counted{Store: st}
	ctx := context.Background()
	if _, err := st.Reserve(ctx, "k", nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	go func() {
		testenv.WaitFor(t, time.Minute, "a poll", func() bool { return s.Reserves() >= 3 })
		rdb.Del(ctx, st.RedisKey("k"))
	}()
	c, err := keystore.Await(ctx, s, "k", nil, time.Hour, keystore.Wait{Min: time.Millisecond, Max: 20 * time.Millisecond, Timeout: time.Minute})
	if err != nil || c.State != keystore.Acquired {
		t.Fatalf("Await: %v %v, want acquired", c.State, err)
	}
	testenv.WaitFor(t, time.Minute, "the subscription closed", func() bool { return redisstore.Subscriptions(st) == 0 })
}

// TestNotifyRedisDown: with the server gone, Notify fails within its
// ctx, and Await polls (and reports the store's error).
func TestNotifyRedisDown(t *testing.T) {
	srv := testenv.StartRedis(t)
	rdb := serverClient(t, srv)
	s := newStore(t, rdb)
	srv.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, _, err := s.Notify(ctx, "k"); err == nil {
		t.Fatal("Notify with the server down: nil error")
	}
	testenv.WaitFor(t, time.Minute, "the subscription closed", func() bool { return redisstore.Subscriptions(s) == 0 })
}

// TestClusterNotifyFirstSubscription: on a Cluster, a store's first
// subscription of a hash tag is confirmed every time, then woken by the
// key's Complete. go-redis connects a PubSub without channels to a random
// node; a store that let its reader connect before the first SSUBSCRIBE
// was sent subscribed on the wrong master about two times in three that
// the reader won the race, and its waiters slept until their poll.
func TestClusterNotifyFirstSubscription(t *testing.T) {
	rdb := clusterClient(t)
	const rounds = 100
	failed := 0
	for i := range rounds {
		s := newStore(t, rdb, redisstore.WithBuckets(64))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		holder, err := s.Reserve(ctx, fmt.Sprint("first-", i), nil, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		ch, stop, err := s.Notify(ctx, holder.Key)
		if err != nil {
			failed++
			t.Errorf("round %d: %v", i, err)
			cancel()
			continue
		}
		if err := s.Complete(ctx, holder, []byte("r"), time.Hour); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			failed++
			t.Errorf("round %d: not woken by the Complete", i)
		}
		stop()
		cancel()
	}
	if failed > 0 {
		t.Fatalf("%d of %d first subscriptions failed", failed, rounds)
	}
}
