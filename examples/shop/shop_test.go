package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// The example's scenario on a fresh directory ends with the actual counts
// equal to the expected ones, and the failures it injects really happened.
func TestShop(t *testing.T) {
	var out bytes.Buffer
	r, err := run(context.Background(), t.TempDir(), 30, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
	if !r.ok() || strings.Contains(out.String(), "MISMATCH") {
		t.Fatalf("counts differ:\n%s", out.String())
	}
	if r.replayed.Load() == 0 || r.jsDuplicates.Load() == 0 || r.inboxDuplicates.Load() == 0 || r.consumerCrashes.Load() != 3 {
		t.Fatalf("the injected failures did not all happen: replays %d, JetStream duplicates %d, inbox duplicates %d, consumer crashes %d",
			r.replayed.Load(), r.jsDuplicates.Load(), r.inboxDuplicates.Load(), r.consumerCrashes.Load())
	}
}
