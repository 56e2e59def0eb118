package inboxprom_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
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
	"github.com/idem-go/idem/sqldialect"
)

// A real inbox on SQLite, observed through a real registry: applied,
// duplicate and handler error are counted by consumer and timed.
func TestInboxMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	h, err := inboxprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", sqldialect.SQLiteDSN(filepath.Join(t.TempDir(), "inbox.db")))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	in, err := inbox.New(db, sqldialect.SQLite, "billing", inbox.WithHooks(h))
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
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
	want := `
# HELP idem_inbox_messages_total Messages that reached a decision, by consumer and outcome: applied, duplicate, mismatch, invalid, error.
# TYPE idem_inbox_messages_total counter
idem_inbox_messages_total{consumer="billing",outcome="applied"} 2
idem_inbox_messages_total{consumer="billing",outcome="duplicate"} 2
idem_inbox_messages_total{consumer="billing",outcome="error"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "idem_inbox_messages_total"); err != nil {
		t.Fatal(err)
	}
	// Timed: applied, duplicate, error.
	if n := testutil.CollectAndCount(reg, "idem_inbox_message_duration_seconds"); n != 3 {
		t.Fatalf("%d duration series, want 3", n)
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
# HELP idem_inbox_messages_total Messages that reached a decision, by consumer and outcome: applied, duplicate, mismatch, invalid, error.
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
