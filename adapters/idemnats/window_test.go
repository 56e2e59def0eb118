package idemnats_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/idemnats"
	"github.com/idem-go/idem/adapters/internal/consume/consumetest"
	"github.com/idem-go/idem/internal/testsupport/natsenv"
	"github.com/idem-go/idem/window/diskwindow"
	"github.com/nats-io/nats.go/jetstream"
)

// sends counts a WindowHandler's successful runs per Nats-Msg-Id; the
// message fail names fails its first run.
type sends struct {
	mu     sync.Mutex
	ok     map[string]int
	runs   map[string]int
	fail   string
	failed bool
}

func newSends(fail string) *sends {
	return &sends{ok: map[string]int{}, runs: map[string]int{}, fail: fail}
}

func (s *sends) handle(_ context.Context, m jetstream.Msg) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := msgID(m)
	s.runs[id]++
	if id == s.fail && !s.failed {
		s.failed = true
		return errors.New("index unavailable")
	}
	s.ok[id]++
	return nil
}

func (s *sends) count(m map[string]int, id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return m[id]
}

func (s *sends) total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, k := range s.ok {
		n += k
	}
	return n
}

func openSet(t testing.TB, dir string) *diskwindow.Set {
	t.Helper()
	s, err := diskwindow.Open(dir, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestWindowCrashAndRestart: the consumer's connection dies after the
// first group's keys are recorded and before any ack; the set is closed
// and reopened from disk (a process restart). The redeliveries of the
// recorded messages are acked as duplicates without running the handler;
// the others run once; a handler that fails once is nak'd, redelivered and
// run again, its key recorded only after it succeeded.
func TestWindowCrashAndRestart(t *testing.T) {
	t.Parallel()
	srv, js, cons, _ := newEnv(t)
	ids := publishAll(t, js, 6)
	dir := t.TempDir()
	snd := newSends(ids[3])
	fast := []idemnats.Option{idemnats.WithBatchSize(len(ids)), idemnats.WithBackoff(10*time.Millisecond, 40*time.Millisecond), idemnats.WithMaxWait(time.Second)}

	set := openSet(t, dir)
	nc, js1 := natsenv.Connect(t, srv.ClientURL())
	cons1, err := js1.Consumer(context.Background(), "ORDERS", "worker")
	if err != nil {
		t.Fatal(err)
	}
	w, err := idemnats.NewWindowConsumer(cons1, set, snd.handle, fast...)
	if err != nil {
		t.Fatal(err)
	}
	if got := w.Scope(); got != "ORDERS" {
		t.Errorf("Scope() = %q, want ORDERS", got)
	}
	idemnats.SetWindowAfterCommit(w, nc.Close) // the crash: recorded, never acked
	if err := w.Run(context.Background()); !errors.Is(err, idem.ErrClosed) {
		t.Fatalf("Run after the connection closed = %v, want ErrClosed", err)
	}
	recorded := snd.total()
	if recorded == 0 {
		t.Fatal("nothing recorded before the crash")
	}
	if info := consumerInfo(t, js); info.NumAckPending == 0 {
		t.Fatal("messages acked before the crash")
	}
	if err := set.Close(); err != nil {
		t.Fatal(err)
	}

	set = openSet(t, dir) // the restart
	defer set.Close()
	var ev events
	w, err = idemnats.NewWindowConsumer(cons, set, snd.handle, append(fast, idemnats.WithObserver(ev.Observe))...)
	if err != nil {
		t.Fatal(err)
	}
	consumetest.RunUntil(t, w.Run, time.Minute, "every message acked", func() bool {
		return ev.Count(idem.Duplicate)+ev.Count(idem.Applied) == len(ids)
	})
	if got := ev.Count(idem.Duplicate); got != recorded {
		t.Errorf("%d redeliveries acked as duplicates, want the %d recorded before the crash", got, recorded)
	}
	for _, id := range ids {
		if n := snd.count(snd.ok, id); n != 1 {
			t.Errorf("%s applied %d times, want 1", id, n)
		}
	}
	if n := snd.count(snd.runs, ids[3]); n != 2 {
		t.Errorf("%s (failing once) ran %d times, want 2", ids[3], n)
	}
	wantAllAcked(t, js)
}

// failingAdd is a set whose AddBatch fails: the handler has run and its
// key cannot be recorded.
type failingAdd struct{ *diskwindow.Set }

func (failingAdd) AddBatch(context.Context, string, []string, time.Time, []bool) ([]bool, error) {
	return nil, errors.New("disk full")
}

// A set that fails stops Run with its error before anything is acked: fail
// closed, nothing skipped, whether it fails before the handler runs (a
// closed set) or after (AddBatch).
func TestWindowSetDown(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		set     func(*diskwindow.Set) idemnats.DedupSet
		wantErr func(error) bool
		ran     bool
	}{
		{"closed", func(s *diskwindow.Set) idemnats.DedupSet { s.Close(); return s },
			func(err error) bool { return errors.Is(err, diskwindow.ErrClosed) }, false},
		{"AddBatch fails", func(s *diskwindow.Set) idemnats.DedupSet { return failingAdd{s} },
			func(err error) bool { return err != nil && strings.Contains(err.Error(), "disk full") }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, js, cons, _ := newEnv(t)
			publishAll(t, js, 3)
			s := openSet(t, t.TempDir())
			defer s.Close()
			snd := newSends("")
			w, err := idemnats.NewWindowConsumer(cons, tc.set(s), snd.handle, idemnats.WithMaxWait(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			r := consumetest.Start(w.Run)
			defer r.Cancel()
			var runErr error
			select {
			case runErr = <-r.Done:
			case <-time.After(time.Minute): // a hang guard, not a speed bound
				t.Fatal("Run did not stop with the set down")
			}
			if !tc.wantErr(runErr) {
				t.Fatalf("Run = %v, want the set's error", runErr)
			}
			if ran := snd.total() > 0; ran != tc.ran {
				t.Fatalf("handler ran: %v, want %v", ran, tc.ran)
			}
			info := consumerInfo(t, js)
			if info.AckFloor.Consumer != 0 {
				t.Fatalf("ack floor %d with the set down: something was acked", info.AckFloor.Consumer)
			}
		})
	}
}

// TestWindowOptions: the options that cannot apply are refused, and so are
// nil arguments.
func TestWindowOptions(t *testing.T) {
	t.Parallel()
	_, _, cons, _ := newEnv(t)
	s := openSet(t, t.TempDir())
	defer s.Close()
	h := func(context.Context, jetstream.Msg) error { return nil }
	for name, f := range map[string]func() error{
		"set handler": func() error {
			_, err := idemnats.NewWindowConsumer(cons, s, h, idemnats.WithSetHandler(func(context.Context, *sql.Tx, []jetstream.Msg) error { return nil }))
			return err
		},
		"fingerprint": func() error {
			_, err := idemnats.NewWindowConsumer(cons, s, h, idemnats.WithFingerprint(func(jetstream.Msg) []byte { return nil }))
			return err
		},
		"nil set":      func() error { _, err := idemnats.NewWindowConsumer(cons, nil, h); return err },
		"nil handler":  func() error { _, err := idemnats.NewWindowConsumer(cons, s, nil); return err },
		"nil consumer": func() error { _, err := idemnats.NewWindowConsumer(nil, s, h); return err },
	} {
		if err := f(); !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", name, err)
		}
	}
}
