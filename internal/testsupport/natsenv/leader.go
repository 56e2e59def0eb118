package natsenv

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ClusterInfo reports the replica state of a stream or consumer as the
// JetStream API reports it; [StreamInfo] and [ConsumerInfo] make one.
type ClusterInfo func() (*jetstream.ClusterInfo, error)

// StreamInfo reports stream's replica state.
func StreamInfo(ctx context.Context, js jetstream.JetStream, stream string) ClusterInfo {
	return func() (*jetstream.ClusterInfo, error) {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		st, err := js.Stream(ctx, stream)
		if err != nil {
			return nil, err
		}
		return st.CachedInfo().Cluster, nil
	}
}

// ConsumerInfo reports the replica state of stream's consumer.
func ConsumerInfo(ctx context.Context, js jetstream.JetStream, stream, consumer string) ClusterInfo {
	return func() (*jetstream.ClusterInfo, error) {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		c, err := js.Consumer(ctx, stream, consumer)
		if err != nil {
			return nil, err
		}
		return c.CachedInfo().Cluster, nil
	}
}

// WaitLeader polls info for up to d until it names a leader other than
// not ("" for any) and returns that server; what names the group in the
// failure message.
func (c *Cluster) WaitLeader(t testing.TB, d time.Duration, what, not string, info ClusterInfo) *Node {
	t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		ci, err := info()
		if err != nil || ci == nil || ci.Leader == "" || ci.Leader == not {
			continue
		}
		if n := c.Node(ci.Leader); n != nil {
			return n
		}
	}
	t.Fatalf("no leader for %s (other than %q) within %v", what, not, d)
	return nil
}

// WaitCurrent polls info for up to d until the leader and both replicas are
// up and current, so that the group survives the loss of any one server.
func WaitCurrent(t testing.TB, d time.Duration, what string, info ClusterInfo) {
	t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		ci, err := info()
		if err != nil || ci == nil || ci.Leader == "" || len(ci.Replicas) != 2 {
			continue
		}
		ok := true
		for _, r := range ci.Replicas {
			ok = ok && r.Current && !r.Offline
		}
		if ok {
			return
		}
	}
	t.Fatalf("%s: replicas not current within %v", what, d)
}
