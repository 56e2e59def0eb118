// Command shop runs idem's whole path on the embedded defaults: an orders
// service behind the Idempotency-Key middleware writes each order and its
// OrderPlaced event in one transaction (outbox); a relay publishes the events
// to an embedded NATS JetStream server with the outbox id as Nats-Msg-Id; an
// inventory consumer applies them through an inbox and applies price updates
// through a version gate.
//
// It then fires the failures idem exists for: client retries (sequential and
// concurrent) with the same Idempotency-Key, a relay that dies after
// publishing and before marking, a consumer that dies after its commit and
// before its ack, and price updates delivered out of order and twice. It
// prints the final stock and order counts next to the expected ones and exits
// 1 if they differ.
//
//	go run ./examples/shop
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
)

func main() {
	orders := flag.Int("orders", 40, "orders to place")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	dir, err := os.MkdirTemp("", "idem-shop-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer os.RemoveAll(dir)
	r, err := run(ctx, dir, *orders, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "shop:", err)
		os.Exit(1)
	}
	if !r.ok() {
		fmt.Println("MISMATCH: effectively-once violated")
		os.Exit(1)
	}
}
