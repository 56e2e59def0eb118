package consume

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/internal/retry"
	"github.com/idem-go/idem/internal/testsupport/inboxtest"
	"github.com/idem-go/idem/sqldialect"
	_ "modernc.org/sqlite"
)

// msg is the fake broker's message: an id header, a body, a digest.
type msg struct {
	id   string
	body string
	fp   []byte
}

func msgKey(m msg) (string, error) {
	if m.id == "-" {
		return "", errors.New("no id header")
	}
	return m.id, nil
}

// fake is a transport over one SQLite inbox: it performs every decision
// and remembers what it did, the way the adapters do on their brokers.
type fake struct {
	t      testing.TB
	db     *sql.DB
	in     *inbox.Inbox
	cfg    Config[msg]
	core   *Inbox[msg]
	mu     sync.Mutex
	events []idem.DeliveryEvent[msg]
}

func newFake(t testing.TB, h Handler[msg], opts ...Option[msg]) *fake {
	t.Helper()
	db, err := sql.Open("sqlite", sqldialect.SQLiteDSN(filepath.Join(t.TempDir(), "c.db")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec("CREATE TABLE effects (k TEXT NOT NULL, body TEXT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	in := inboxtest.Migrated(t, db, sqldialect.SQLite, "consume-test")
	f := &fake{t: t, db: db, in: in, cfg: Defaults("faketransport", msgKey)}
	f.cfg.Backoff = retry.Backoff{Min: time.Millisecond, Max: 8 * time.Millisecond}
	f.cfg.MaxAttempts = 3
	f.cfg.Fingerprint = func(m msg) []byte { return m.fp }
	opts = append(opts, WithObserver(func(e idem.DeliveryEvent[msg]) {
		f.mu.Lock()
		f.events = append(f.events, e)
		f.mu.Unlock()
	}))
	if err := Apply("faketransport", &f.cfg, opts); err != nil {
		t.Fatal(err)
	}
	if f.core, err = NewInbox(in, h, &f.cfg); err != nil {
		t.Fatal(err)
	}
	return f
}

// insert is the row handler every test uses: one effects row per message,
// and a few bodies that fail in their own ways.
func insert(ctx context.Context, tx *sql.Tx, m msg) error {
	switch m.body {
	case "fail":
		return errors.New("handler failed")
	case "poison":
		return idem.Permanent(errors.New("cannot parse"))
	case "panic":
		var p *msg
		_ = p.body // nil dereference
	}
	_, err := tx.ExecContext(ctx, "INSERT INTO effects VALUES (?, ?)", m.id, m.body)
	return err
}

// insertAll is the set handler: one multi-row INSERT.
func insertAll(ctx context.Context, tx *sql.Tx, ms []msg) error {
	var b strings.Builder
	args := make([]any, 0, 2*len(ms))
	for i, m := range ms {
		if m.body != "" {
			return insert(ctx, tx, m)
		}
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("(?, ?)")
		args = append(args, m.id, m.body)
	}
	_, err := tx.ExecContext(ctx, "INSERT INTO effects VALUES "+b.String(), args...)
	return err
}

// deliver runs one batch at the given attempt and performs the decisions:
// it returns them with Process's error.
func (f *fake) deliver(ctx context.Context, attempt int, ms ...msg) ([]Decision, error) {
	ds := make([]Delivery[msg], len(ms))
	for i, m := range ms {
		ds[i] = Delivery[msg]{Msg: m, Attempt: attempt}
	}
	decs, err := f.core.Process(ctx, ds)
	if decs != nil && len(decs) != len(ds) {
		f.t.Fatalf("%d decisions for %d deliveries", len(decs), len(ds))
	}
	for i := range decs {
		f.cfg.Report(&ds[i], decs[i])
	}
	return decs, err
}

func (f *fake) effects() map[string]int {
	f.t.Helper()
	rows, err := f.db.Query("SELECT k FROM effects")
	if err != nil {
		f.t.Fatal(err)
	}
	defer rows.Close()
	n := map[string]int{}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			f.t.Fatal(err)
		}
		n[k]++
	}
	return n
}

// outcomes renders decisions as "applied duplicate dead-lettered/permanent …".
func outcomes(decs []Decision) string {
	s := make([]string, len(decs))
	for i, d := range decs {
		s[i] = d.Outcome.String()
		if d.Reason != "" {
			s[i] += "/" + string(d.Reason)
		}
	}
	return strings.Join(s, " ")
}

// handlers are the two ways of applying a batch; every batch test runs with
// both.
var handlers = []struct {
	name string
	h    Handler[msg]
	opts []Option[msg]
}{
	{"row", insert, nil},
	{"set", insert, []Option[msg]{WithSetHandler(insertAll)}},
}

func TestBatchDecisions(t *testing.T) {
	long := strings.Repeat("x", idem.MaxKeyLen+1)
	cases := []struct {
		name    string
		attempt int
		batch   []msg
		want    string
	}{
		{"duplicates in one batch", 1, []msg{{id: "a"}, {id: "a"}, {id: "b"}, {id: "a"}},
			"applied duplicate applied duplicate"},
		{"missing, invalid key, oversized fingerprint", 1,
			[]msg{{id: "-"}, {id: long}, {id: "c", fp: make([]byte, idem.MaxFingerprintLen+1)}, {id: "d"}},
			"dead-lettered/missing-key dead-lettered/invalid-key dead-lettered/invalid-fingerprint applied"},
		{"permanent", 1, []msg{{id: "e"}, {id: "f", body: "poison"}, {id: "g"}},
			"applied dead-lettered/permanent applied"},
		{"failure retried", 1, []msg{{id: "h", body: "fail"}, {id: "i"}}, "retried applied"},
		{"failure at the last attempt", 3, []msg{{id: "j", body: "fail"}, {id: "k"}},
			"dead-lettered/max-attempts applied"},
		{"panic isolated", 1, []msg{{id: "l"}, {id: "m", body: "panic"}, {id: "n"}}, "applied retried applied"},
		{"panic at the last attempt", 3, []msg{{id: "o", body: "panic"}}, "dead-lettered/max-attempts"},
	}
	for _, hc := range handlers {
		for _, tc := range cases {
			t.Run(hc.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				f := newFake(t, hc.h, hc.opts...)
				decs, err := f.deliver(context.Background(), tc.attempt, tc.batch...)
				if err != nil {
					t.Fatal(err)
				}
				if got := outcomes(decs); got != tc.want {
					t.Fatalf("decisions %q, want %q", got, tc.want)
				}
				effects := f.effects()
				for i, d := range decs {
					k := tc.batch[i].id
					if n := effects[k]; n > 1 || (d.Outcome == idem.Applied) != (n == 1) && d.Outcome != idem.Duplicate {
						t.Fatalf("%s: %d effects after %v", k, n, d.Outcome)
					}
					if d.Outcome == idem.Retried && (d.After < f.cfg.Backoff.Min/2 || d.After > f.cfg.Backoff.Max || d.Err == nil) {
						t.Fatalf("%s: retry after %v (err %v)", k, d.After, d.Err)
					}
				}
				if len(f.events) != len(tc.batch) {
					t.Fatalf("%d events for %d deliveries", len(f.events), len(tc.batch))
				}
			})
		}
	}
}

func TestFingerprintMismatch(t *testing.T) {
	for _, hc := range handlers {
		t.Run(hc.name, func(t *testing.T) {
			f := newFake(t, hc.h, hc.opts...)
			ctx := context.Background()
			if decs, err := f.deliver(ctx, 1, msg{id: "a", fp: []byte("v1")}); err != nil || outcomes(decs) != "applied" {
				t.Fatalf("first delivery: %s, %v", outcomes(decs), err)
			}
			decs, err := f.deliver(ctx, 1, msg{id: "a", fp: []byte("v1")}, msg{id: "a", fp: []byte("v2")}, msg{id: "a"})
			if err != nil {
				t.Fatal(err)
			}
			if got := outcomes(decs); got != "duplicate dead-lettered/fingerprint-mismatch duplicate" {
				t.Fatalf("redeliveries: %s", got)
			}
			if !errors.Is(decs[1].Err, idem.ErrFingerprintMismatch) {
				t.Fatalf("mismatch error %v", decs[1].Err)
			}
			if n := f.effects()["a"]; n != 1 {
				t.Fatalf("%d effects", n)
			}
		})
	}
}

// A set handler with no per-message fallback fails its whole batch:
// nothing commits, every delivery is retried, and its attempt does not
// count (Retry, even at the last attempt).
func TestSetHandlerWithoutFallback(t *testing.T) {
	f := newFake(t, nil, WithSetHandler(insertAll))
	decs, err := f.deliver(context.Background(), 3, msg{id: "a"}, msg{id: "b", body: "fail"}, msg{id: "-"})
	var he *inbox.HandlerError
	if !errors.As(err, &he) {
		t.Fatalf("error %v, want an *inbox.HandlerError", err)
	}
	if got := outcomes(decs); got != "retried retried dead-lettered/missing-key" {
		t.Fatalf("decisions %s", got)
	}
	if n := len(f.effects()); n != 0 {
		t.Fatalf("%d effects committed", n)
	}
}

// Cancelling ctx inside a batch commits nothing and decides nothing: the
// transport must leave every delivery to the broker's redelivery, which
// then applies each once.
func TestCancelMidBatch(t *testing.T) {
	for _, hc := range handlers {
		t.Run(hc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var calls int
			h := func(ctx context.Context, tx *sql.Tx, m msg) error {
				if calls++; calls == 2 {
					cancel()
				}
				return insert(ctx, tx, m)
			}
			set := func(ctx context.Context, tx *sql.Tx, ms []msg) error {
				cancel()
				return insertAll(ctx, tx, ms)
			}
			opts := []Option[msg]{}
			if hc.name == "set" {
				opts = append(opts, WithSetHandler(set))
			}
			f := newFake(t, h, opts...)
			batch := []msg{{id: "a"}, {id: "b"}, {id: "c"}}
			decs, err := f.deliver(ctx, 1, batch...)
			if !errors.Is(err, context.Canceled) || decs != nil {
				t.Fatalf("Process: %s, %v; want no decisions and context.Canceled", outcomes(decs), err)
			}
			if n := len(f.effects()); n != 0 {
				t.Fatalf("%d effects committed by a cancelled batch", n)
			}
			f.core.h, f.cfg.Set = insert, nil
			f.core, _ = NewInbox(f.in, insert, &f.cfg)
			decs, err = f.deliver(context.Background(), 2, batch...)
			if err != nil || outcomes(decs) != "applied applied applied" {
				t.Fatalf("redelivery: %s, %v", outcomes(decs), err)
			}
		})
	}
}

// Many transports deliver the same keys at once (a redelivery racing the
// original, several consumers of one queue): each key applies once.
func TestConcurrentDuplicates(t *testing.T) {
	for _, hc := range handlers {
		t.Run(hc.name, func(t *testing.T) {
			f := newFake(t, hc.h, hc.opts...)
			batch := []msg{{id: "a"}, {id: "b"}, {id: "a"}, {id: "c"}}
			var wg sync.WaitGroup
			var mu sync.Mutex
			applied := map[string]int{}
			for range 8 {
				wg.Go(func() {
					decs, err := f.deliver(context.Background(), 1, batch...)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					defer mu.Unlock()
					for i, d := range decs {
						if !d.Ack() {
							t.Errorf("%s: %v", batch[i].id, d.Outcome)
						}
						if d.Outcome == idem.Applied {
							applied[batch[i].id]++
						}
					}
				})
			}
			wg.Wait()
			for _, k := range []string{"a", "b", "c"} {
				if applied[k] != 1 || f.effects()[k] != 1 {
					t.Fatalf("%s: applied %d times, %d effects", k, applied[k], f.effects()[k])
				}
			}
		})
	}
}

// ProcessOne is the in-process retry: a message that failed in its batch
// runs alone until it applies or is dead-lettered.
func TestProcessOne(t *testing.T) {
	for _, hc := range append(handlers, struct {
		name string
		h    Handler[msg]
		opts []Option[msg]
	}{"set only", nil, []Option[msg]{WithSetHandler(insertAll)}}) {
		t.Run(hc.name, func(t *testing.T) {
			failing := true
			h := func(ctx context.Context, tx *sql.Tx, m msg) error {
				if failing {
					return errors.New("transient")
				}
				return insert(ctx, tx, m)
			}
			set := func(ctx context.Context, tx *sql.Tx, ms []msg) error { return h(ctx, tx, ms[0]) }
			opts := []Option[msg]{}
			if hc.name != "row" {
				opts = append(opts, WithSetHandler(set))
			}
			each := Handler[msg](h)
			if hc.h == nil {
				each = nil
			}
			f := newFake(t, each, opts...)
			d := Delivery[msg]{Msg: msg{id: "a"}, Attempt: 1}
			decs, err := f.core.Process(context.Background(), []Delivery[msg]{d})
			if decs[0].Outcome != idem.Retried || (err == nil) != (hc.h != nil) {
				t.Fatalf("batch: %s, %v", outcomes(decs), err)
			}
			d.Key = "a"
			for d.Attempt = 2; ; d.Attempt++ {
				failing = d.Attempt < 3
				dec, err := f.core.ProcessOne(context.Background(), &d)
				if err != nil {
					t.Fatal(err)
				}
				if dec.Outcome != idem.Retried {
					if dec.Outcome != idem.Applied || d.Attempt != 3 {
						t.Fatalf("attempt %d: %v", d.Attempt, dec.Outcome)
					}
					break
				}
			}
			if dec, err := f.core.ProcessOne(context.Background(), &d); err != nil || dec.Outcome != idem.Duplicate {
				t.Fatalf("again: %v, %v", dec.Outcome, err)
			}
			if f.effects()["a"] != 1 {
				t.Fatal("effect not applied once")
			}
		})
	}
}

func TestOptions(t *testing.T) {
	bad := []struct {
		name string
		opt  Option[msg]
	}{
		{"nil key", WithKey[msg](nil)},
		{"nil fingerprint", WithFingerprint[msg](nil)},
		{"nil set handler", WithSetHandler[msg](nil)},
		{"batch 0", WithBatchSize[msg](0)},
		{"batch too big", WithBatchSize[msg](10001)},
		{"attempts 0", WithMaxAttempts[msg](0)},
		{"backoff reversed", WithBackoff[msg](time.Second, time.Millisecond)},
		{"backoff negative", WithBackoff[msg](-1, time.Second)},
		{"nil observer", WithObserver[msg](nil)},
		{"nil logger", WithLogger[msg](nil)},
		{"nil tracer", WithTracer[msg](nil)},
		{"nil option", nil},
	}
	for _, tc := range bad {
		cfg := Defaults("faketransport", msgKey)
		err := Apply("faketransport", &cfg, []Option[msg]{tc.opt})
		if !errors.Is(err, idem.ErrInvalidOption) || !strings.HasPrefix(err.Error(), "faketransport: ") {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	cfg := Defaults("faketransport", msgKey)
	if err := Apply("faketransport", &cfg, []Option[msg]{WithBatchSize[msg](7), WithMaxAttempts[msg](2),
		WithBackoff[msg](time.Millisecond, time.Second), WithKey(func(m msg) (string, error) { return "k" + m.id, nil })}); err != nil {
		t.Fatal(err)
	}
	if cfg.BatchSize != 7 || cfg.MaxAttempts != 2 || cfg.Backoff.Max != time.Second {
		t.Fatalf("options not applied: %+v", cfg)
	}
	d := Delivery[msg]{Msg: msg{id: "x"}}
	if _, ok := cfg.Prepare(&d); !ok || d.Key != "kx" {
		t.Fatalf("key %q", d.Key)
	}
	if _, err := NewInbox[msg](nil, insert, &cfg); !errors.Is(err, idem.ErrInvalidOption) {
		t.Fatalf("nil inbox: %v", err)
	}
	f := newFake(t, insert)
	if _, err := NewInbox(f.in, nil, &cfg); !errors.Is(err, idem.ErrInvalidOption) {
		t.Fatalf("no handler: %v", err)
	}
	// Check, the shape of an adapter's own option.
	type own struct{ n int }
	var o own
	if err := Check("transport", false, func(c *own) { c.n = 1 }, "n %d out of range", 7)(&o); !errors.Is(err, idem.ErrInvalidOption) ||
		err.Error() != "transport: n 7 out of range: idem: invalid option" || o.n != 0 {
		t.Fatalf("refused option: %v, n %d", err, o.n)
	}
	if err := Check("transport", true, func(c *own) { c.n = 1 }, "")(&o); err != nil || o.n != 1 {
		t.Fatalf("accepted option: %v, n %d", err, o.n)
	}
}

// The decision rule without an inbox, as a key store transport uses it.
func TestDecide(t *testing.T) {
	cfg := Defaults("faketransport", msgKey)
	cfg.MaxAttempts = 2
	fail := errors.New("boom")
	cases := []struct {
		attempt int
		applied bool
		err     error
		want    string
	}{
		{1, true, nil, "applied"},
		{1, false, nil, "duplicate"},
		{1, false, fmt.Errorf("store: %w", idem.ErrFingerprintMismatch), "dead-lettered/fingerprint-mismatch"},
		{1, false, idem.Permanent(fail), "dead-lettered/permanent"},
		{1, false, fail, "retried"},
		{2, false, fail, "dead-lettered/max-attempts"},
		{0, false, fail, "retried"},
	}
	for _, tc := range cases {
		d := Delivery[msg]{Attempt: tc.attempt}
		if got := outcomes([]Decision{cfg.Decide(&d, tc.applied, tc.err)}); got != tc.want {
			t.Errorf("attempt %d, %v: %s, want %s", tc.attempt, tc.err, got, tc.want)
		}
	}
	d := Delivery[msg]{Msg: msg{id: "-"}}
	dec, ok := cfg.Prepare(&d)
	if ok || !errors.Is(dec.Err, idem.ErrMissingKey) || !strings.HasPrefix(dec.Err.Error(), "faketransport: ") {
		t.Fatalf("missing key: %v", dec.Err)
	}
}
