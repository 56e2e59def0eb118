package window_test

import (
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/idem-go/idem/window"
)

// A JetStream-style publish dedup with a 2-minute window: a producer retry
// within the window is acknowledged as a duplicate with the original
// sequence; the window does not slide.
func ExampleDedup_Seen() {
	d, err := window.New(2 * time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, p := range []struct {
		id string
		at time.Duration
	}{
		{"order-1", 0},
		{"order-2", time.Second},
		{"order-1", 30 * time.Second},  // retry after a lost ack
		{"order-1", 119 * time.Second}, // still inside the first accept's window
		{"order-1", 120 * time.Second}, // exactly 2 minutes after it: new again
	} {
		dup, seq := d.Seen("ORDERS", p.id, t0.Add(p.at))
		fmt.Printf("%-7s +%-4v duplicate=%-5v seq=%d\n", p.id, p.at, dup, seq)
	}
	// Output:
	// order-1 +0s   duplicate=false seq=1
	// order-2 +1s   duplicate=false seq=2
	// order-1 +30s  duplicate=true  seq=1
	// order-1 +1m59s duplicate=true  seq=1
	// order-1 +2m0s duplicate=false seq=3
}

// SQS FIFO-style: scope per queue and message group, content-based ids.
func ExampleContentID() {
	d, err := window.New(5 * time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	now := time.Now()
	body := []byte(`{"order":42,"amount":50}`)
	for _, group := range []string{"customer-7", "customer-7", "customer-8"} {
		dup, seq := d.Seen("payments.fifo|"+group, window.ContentID(body), now)
		fmt.Println(group, dup, seq)
	}
	// Output:
	// customer-7 false 1
	// customer-7 true 1
	// customer-8 false 2
}

// With a bound on live ids, Add refuses new ids instead of evicting ones
// whose window is still open; the caller leaves the message unacknowledged.
func ExampleDedup_Add() {
	d, err := window.New(time.Minute, window.WithMaxEntries(1))
	if err != nil {
		log.Fatal(err)
	}
	now := time.Now()
	for _, id := range []string{"a", "b", "a"} {
		dup, seq, err := d.Add("q", id, now)
		switch {
		case errors.Is(err, window.ErrFull):
			fmt.Println(id, "refused: full, retry later")
		case err != nil:
			log.Fatal(err)
		default:
			fmt.Println(id, dup, seq)
		}
	}
	// Output:
	// a false 1
	// b refused: full, retry later
	// a true 1
}

// A consumer that fetches messages in batches answers each batch with one
// call: ids repeated inside the batch, or seen before, are duplicates.
func ExampleDedup_AddBatch() {
	d, err := window.New(2 * time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	d.Seen("ORDERS", "order-1", now)
	batch := []string{"order-1", "order-2", "order-3", "order-2"}
	for i, r := range d.AddBatch("ORDERS", batch, now.Add(time.Second), nil) {
		if r.Err != nil {
			log.Fatal(r.Err) // not recorded: leave the message unacknowledged
		}
		fmt.Printf("%s duplicate=%-5v seq=%d\n", batch[i], r.Dup, r.Original)
	}
	// Output:
	// order-1 duplicate=true  seq=1
	// order-2 duplicate=false seq=2
	// order-3 duplicate=false seq=3
	// order-2 duplicate=true  seq=2
}

// Sized up front for the ids a window holds at its rate: 2,000 messages a
// second for 2 minutes. The index is allocated once, for 240,000 ids, and
// never grows while they arrive.
func ExampleWithCapacity() {
	const rate, win = 2000, 2 * time.Minute
	d, err := window.New(win, window.WithCapacity(rate*int(win/time.Second)))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("index bytes before any id:", d.Bytes() > 240_000*5)
	dup, seq := d.Seen("ORDERS", "order-1", time.Now())
	fmt.Println(dup, seq)
	// Output:
	// index bytes before any id: true
	// false 1
}
