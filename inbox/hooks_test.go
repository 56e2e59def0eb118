package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem/inbox"
)

// recorder is an [inbox.Hooks] that writes down every call.
type recorder struct {
	mu    sync.Mutex
	calls []string
}

func (r *recorder) add(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, fmt.Sprintf(format, args...))
}

func (r *recorder) Processed(consumer string, applied bool, err error, _ time.Duration) {
	r.add("processed %s applied=%v failed=%v", consumer, applied, err != nil)
}
func (r *recorder) Retried(consumer string, attempt int, _ error) {
	r.add("retried %s attempt=%d", consumer, attempt)
}
func (r *recorder) Swept(consumer string, n int) { r.add("swept %s %d", consumer, n) }
func (r *recorder) Batch(consumer string, n int, _ time.Duration) {
	r.add("batch %s n=%d", consumer, n)
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.calls
	r.calls = nil
	return c
}

// TestHooks: WithHooks sees every decision, retry, batch and sweep of a
// real inbox, in order.
func TestHooks(t *testing.T) {
	rec := &recorder{}
	e := setup(t, backends[2], inbox.WithHooks(rec), inbox.WithRetry(5, time.Millisecond, 5*time.Millisecond)) // postgres: retryableErr speaks its SQLSTATE
	ctx := context.Background()
	calls := 0
	flaky := func(ctx context.Context, tx *sql.Tx) error {
		if calls++; calls < 3 {
			return retryableErr{}
		}
		return e.credit(1, 50)(ctx, tx)
	}
	each := func(ctx context.Context, tx *sql.Tx, _ inbox.Message) error { return e.credit(2, 1)(ctx, tx) }
	steps := []struct {
		name string
		run  func() error
		want []string
	}{
		{"applied after two retries", func() error { _, err := e.in.Process(ctx, "evt-1", flaky); return err },
			[]string{"retried wallet-consumer attempt=1", "retried wallet-consumer attempt=2", "processed wallet-consumer applied=true failed=false"}},
		{"duplicate", func() error { _, err := e.in.Process(ctx, "evt-1", flaky); return err },
			[]string{"processed wallet-consumer applied=false failed=false"}},
		{"handler error", func() error {
			_, err := e.in.Process(ctx, "evt-2", func(context.Context, *sql.Tx) error { return errors.New("boom") })
			if err == nil {
				return errors.New("no error")
			}
			return nil
		}, []string{"processed wallet-consumer applied=false failed=true"}},
		{"batch", func() error {
			_, err := e.in.ProcessBatch(ctx, []inbox.Message{{Key: "b-1"}, {Key: "b-2"}, {Key: "evt-1"}}, each)
			return err
		}, []string{"batch wallet-consumer n=3", "processed wallet-consumer applied=true failed=false", "processed wallet-consumer applied=true failed=false", "processed wallet-consumer applied=false failed=false"}},
		{"sweep", func() error { _, err := e.in.Sweep(ctx, time.Hour, 100); return err },
			[]string{"swept wallet-consumer 0"}},
	}
	for _, s := range steps {
		if err := s.run(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := rec.take(); fmt.Sprint(got) != fmt.Sprint(s.want) {
			t.Errorf("%s: hooks saw\n%q\nwant\n%q", s.name, got, s.want)
		}
	}
	if _, err := inbox.New(e.db, e.d, "c", inbox.WithHooks(nil)); err == nil {
		t.Error("WithHooks(nil) accepted")
	}
}
