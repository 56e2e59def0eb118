package idemnats_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/idem-go/idem/adapters/idemnats"
	"github.com/idem-go/idem/window/diskwindow"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A WindowConsumer skips what it has applied within the set's horizon,
// across restarts: here a durable consumer is recreated from the start of
// the stream (as after a reset) and the set, reopened from its directory,
// acks the message as a duplicate without running the handler again.
func ExampleNewWindowConsumer() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "idemnats-window-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ns, err := server.NewServer(&server.Options{JetStream: true, StoreDir: dir, Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		log.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		log.Fatal("nats-server not ready")
	}
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}}); err != nil {
		log.Fatal(err)
	}
	if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: "orders.created", Data: []byte("order 1")}, jetstream.WithMsgID("order-1")); err != nil {
		log.Fatal(err)
	}

	runs := 0
	index := func(ctx context.Context, m jetstream.Msg) error {
		runs++ // in production: a write downstream that takes the key
		return nil
	}
	consumeOnce := func() {
		set, err := diskwindow.Open(filepath.Join(dir, "dedup"), 24*time.Hour)
		if err != nil {
			log.Fatal(err)
		}
		defer set.Close()
		js.DeleteConsumer(ctx, "ORDERS", "indexer") // recreated from the start
		cons, err := js.CreateConsumer(ctx, "ORDERS", jetstream.ConsumerConfig{Durable: "indexer", AckPolicy: jetstream.AckExplicitPolicy})
		if err != nil {
			log.Fatal(err)
		}
		runCtx, stop := context.WithCancel(ctx)
		w, err := idemnats.NewWindowConsumer(cons, set, index, idemnats.WithObserver(func(e idemnats.Event) {
			fmt.Printf("%s: %s\n", e.Key, e.Outcome)
			stop() // one message in this example
		}))
		if err != nil {
			log.Fatal(err)
		}
		if err := w.Run(runCtx); !errors.Is(err, context.Canceled) {
			log.Fatal(err)
		}
	}
	consumeOnce()
	consumeOnce()
	fmt.Println("handler runs:", runs)
	// Output:
	// order-1: applied
	// order-1: duplicate
	// handler runs: 1
}
