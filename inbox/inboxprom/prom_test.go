package inboxprom_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	_ "modernc.org/sqlite"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/inbox/inboxprom"
	"github.com/idem-go/idem/internal/testsupport/inboxtest"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/sqldialect"
)

// A real inbox on SQLite, observed through a real registry: applied,
// duplicate and handler error are counted by consumer and timed, and a
// batch's size is observed.
func TestInboxMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	h, err := inboxprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	db := testenv.SQLite(t)
	ctx := context.Background()
	in := inboxtest.Migrated(t, db, sqldialect.SQLite, "billing", inbox.WithHooks(h))
	ok := func(context.Context, *sql.Tx) error { return nil }
	for _, key := range []string{"a", "b", "a", "a"} {
		if _, err := in.Process(ctx, key, ok); err != nil {
			t.Fatal(err)
		}
	}
	boom := errors.New("handler failed")
	if _, err := in.Process(ctx, "c", func(context.Context, *sql.Tx) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Process: %v", err)
	}
	// A batch of 4: three new keys, one already applied.
	batch := []inbox.Message{{Key: "d"}, {Key: "e"}, {Key: "a"}, {Key: "f"}}
	if _, err := in.ProcessBatch(ctx, batch, func(context.Context, *sql.Tx, inbox.Message) error { return nil }); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP idem_inbox_messages_total Messages that reached a decision, by consumer and outcome: applied, duplicate, mismatch, invalid, handler_error, error.
# TYPE idem_inbox_messages_total counter
idem_inbox_messages_total{consumer="billing",outcome="applied"} 5
idem_inbox_messages_total{consumer="billing",outcome="duplicate"} 3
idem_inbox_messages_total{consumer="billing",outcome="handler_error"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "idem_inbox_messages_total"); err != nil {
		t.Fatal(err)
	}
	// Timed: applied, duplicate, handler_error.
	if n := testutil.CollectAndCount(reg, "idem_inbox_message_duration_seconds"); n != 3 {
		t.Fatalf("%d duration series, want 3", n)
	}
	// One batch of 4 in the powers-of-two buckets: in every bucket from 4 up.
	var wantBatch strings.Builder
	wantBatch.WriteString("# HELP idem_inbox_batch_size Valid messages per ProcessBatch transaction, by consumer.\n# TYPE idem_inbox_batch_size histogram\n")
	for le := 1; le <= 2048; le *= 2 {
		fmt.Fprintf(&wantBatch, "idem_inbox_batch_size_bucket{consumer=\"billing\",le=\"%d\"} %d\n", le, min(le/4, 1))
	}
	wantBatch.WriteString(`idem_inbox_batch_size_bucket{consumer="billing",le="+Inf"} 1
idem_inbox_batch_size_sum{consumer="billing"} 4
idem_inbox_batch_size_count{consumer="billing"} 1
`)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(wantBatch.String()), "idem_inbox_batch_size"); err != nil {
		t.Fatal(err)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", problems, err)
	}
}

func TestHooksDirect(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	h, err := inboxprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	h.Processed("c", false, fmt.Errorf("x: %w", idem.ErrFingerprintMismatch), time.Millisecond)
	h.Retried("c", 1, errors.New("busy"))
	h.Retried("c", 2, errors.New("busy"))
	h.Swept("c", 7)
	want := `
# HELP idem_inbox_messages_total Messages that reached a decision, by consumer and outcome: applied, duplicate, mismatch, invalid, handler_error, error.
# TYPE idem_inbox_messages_total counter
idem_inbox_messages_total{consumer="c",outcome="mismatch"} 1
# HELP idem_inbox_retries_total Transactions retried after a retryable error (serialization failure, deadlock, busy), by consumer.
# TYPE idem_inbox_retries_total counter
idem_inbox_retries_total{consumer="c"} 2
# HELP idem_inbox_swept_total Key rows deleted by Sweep, by consumer.
# TYPE idem_inbox_swept_total counter
idem_inbox_swept_total{consumer="c"} 7
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "idem_inbox_messages_total", "idem_inbox_retries_total", "idem_inbox_swept_total"); err != nil {
		t.Fatal(err)
	}
	if _, err := inboxprom.New(reg); err == nil {
		t.Fatal("registering twice succeeded")
	}
	if _, err := inboxprom.New(nil); !errors.Is(err, idem.ErrInvalidOption) {
		t.Fatalf("New(nil): %v", err)
	}
}

// Hooks on an inbox, with a label that names the service in a shared
// registry: one message applied, then its duplicate.
func ExampleNew() {
	reg := prometheus.NewRegistry()
	h, err := inboxprom.New(reg, inboxprom.WithConstLabels(prometheus.Labels{"service": "billing"}))
	if err != nil {
		fmt.Println(err)
		return
	}
	dir, _ := os.MkdirTemp("", "inboxprom-")
	defer os.RemoveAll(dir)
	db, _ := sql.Open("sqlite", sqldialect.SQLiteDSN(filepath.Join(dir, "inbox.db")))
	defer db.Close()
	ctx := context.Background()
	in, err := inbox.New(db, sqldialect.SQLite, "payments", inbox.WithHooks(h))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := in.Migrate(ctx); err != nil {
		fmt.Println(err)
		return
	}
	for range 2 {
		_, _ = in.Process(ctx, "evt-1", func(context.Context, *sql.Tx) error { return nil })
	}
	n, err := testutil.GatherAndCount(reg, "idem_inbox_messages_total")
	fmt.Println(n, "series", err)
	// Output: 2 series <nil>
}
