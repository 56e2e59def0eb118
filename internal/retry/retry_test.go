package retry

import (
	"context"
	"testing"
	"time"
)

func TestDelayStaysInBounds(t *testing.T) {
	b := Backoff{Min: 10 * time.Millisecond, Max: 300 * time.Millisecond}
	for attempt := -1; attempt < 70; attempt++ {
		hi := b.Bound(attempt)
		if hi < b.Min || hi > b.Max {
			t.Fatalf("attempt %d: bound %v outside [%v, %v]", attempt, hi, b.Min, b.Max)
		}
		for range 200 {
			d := b.Delay(attempt)
			if d < b.Min/2 || d > hi {
				t.Fatalf("attempt %d: delay %v outside [%v, %v]", attempt, d, b.Min/2, hi)
			}
		}
	}
	if b.Bound(0) != b.Min || b.Bound(1) != 2*b.Min || b.Bound(10) != b.Max {
		t.Fatalf("bounds %v %v %v, want doubling from %v to %v", b.Bound(0), b.Bound(1), b.Bound(10), b.Min, b.Max)
	}
}

func TestDelayJitters(t *testing.T) {
	b := Backoff{Min: time.Millisecond, Max: time.Second}
	seen := map[time.Duration]bool{}
	for range 100 {
		seen[b.Delay(8)] = true
	}
	if len(seen) < 50 {
		t.Fatalf("%d distinct delays in 100 draws; waiters would retry in lockstep", len(seen))
	}
}

func TestZeroBackoff(t *testing.T) {
	var b Backoff
	if d := b.Delay(3); d != 0 {
		t.Fatalf("zero Backoff delays %v", d)
	}
	if err := b.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestValidate(t *testing.T) {
	for _, b := range []Backoff{{Min: -1, Max: 1}, {Min: 2, Max: 1}, {Min: 1, Max: -1}} {
		if b.Validate() == nil {
			t.Errorf("%+v accepted", b)
		}
	}
}

func TestSleepEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(10 * time.Millisecond); cancel() }()
	start := time.Now()
	if err := Sleep(ctx, time.Hour); err != context.Canceled {
		t.Fatalf("Sleep: %v, want context.Canceled", err)
	}
	if time.Since(start) > 10*time.Second {
		t.Fatal("Sleep outlived its context")
	}
	if err := Sleep(ctx, 0); err != context.Canceled {
		t.Fatalf("Sleep(0) on an ended context: %v", err)
	}
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatal(err)
	}
}
