package natsenv_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idem-go/idem/internal/testsupport/natsenv"
)

func TestRun(t *testing.T) {
	s := natsenv.Run(t, t.TempDir(), -1)
	_, js := natsenv.Connect(t, s.ClientURL())
	if _, err := js.AccountInfo(context.Background()); err != nil {
		t.Fatal(err)
	}
	if natsenv.Port(s) <= 0 {
		t.Fatalf("port %d", natsenv.Port(s))
	}
}

// A stream's leader killed: another is elected, the killed node comes back
// on its store and catches up.
func TestClusterKillAndRestart(t *testing.T) {
	c := natsenv.Start(t)
	ctx := context.Background()
	_, js := c.Connect(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	info := natsenv.StreamInfo(ctx, js, "S")
	natsenv.WaitCurrent(t, 30*time.Second, "stream", info)
	victim := c.WaitLeader(t, 30*time.Second, "stream", "", info)
	victim.Kill()
	victim.Kill() // a stopped node: nothing
	if next := c.WaitLeader(t, 30*time.Second, "stream", victim.Name(), info); next == victim {
		t.Fatal("the killed node still leads")
	}
	if _, err := js.Publish(ctx, "s.1", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	natsenv.WaitCurrent(t, 30*time.Second, "stream after restart", info)
	if len(c.Nodes()) != 3 || c.Node("n9") != nil {
		t.Fatalf("nodes %d", len(c.Nodes()))
	}
}
