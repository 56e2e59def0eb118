package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/testsupport/dbtest"
	"github.com/idem-go/idem/internal/testsupport/inboxtest"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/outbox"
	"github.com/idem-go/idem/sqldialect"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

var dbs = []dbtest.DB{dbtest.SQLite, dbtest.Postgres}

// broker records every publication, in order, and can fail a batch after
// "sending" it, as a relay that dies between publish and mark would.
type broker struct {
	mu       sync.Mutex
	log      []outbox.Message
	failRate float64
	rng      *rand.Rand
}

var errCrash = errors.New("relay died after publishing")

func (b *broker) Publish(ctx context.Context, msgs []outbox.Message) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.log = append(b.log, msgs...)
	if b.rng != nil && b.rng.Float64() < b.failRate {
		return errCrash
	}
	return nil
}

func setup(t *testing.T, d sqldialect.Dialect, open func(testing.TB) *sql.DB) (*sql.DB, *outbox.Outbox) {
	t.Helper()
	db := open(t)
	o, err := outbox.New(d)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Migrate(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	return db, o
}

func TestAddCommitsWithTheBusinessTransaction(t *testing.T) {
	for _, c := range dbs {
		t.Run(c.D.String(), func(t *testing.T) {
			db, o := setup(t, c.D, c.Open)
			ctx := context.Background()
			for _, commit := range []bool{false, true} {
				tx, _ := db.BeginTx(ctx, nil)
				if _, err := o.Add(ctx, tx, outbox.Message{ID: fmt.Sprint("order-created-", commit), Topic: "orders", OrderingKey: "order-1", Payload: []byte("{}"), Headers: map[string]string{"type": "OrderCreated"}}); err != nil {
					t.Fatal(err)
				}
				if commit {
					_ = tx.Commit()
				} else {
					_ = tx.Rollback()
				}
			}
			b := &broker{}
			r, err := outbox.NewRelay(db, o, b)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 2; i++ {
				if _, err := r.RunOnce(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if len(b.log) != 1 || b.log[0].ID != "order-created-true" || b.log[0].Headers["type"] != "OrderCreated" || b.log[0].OrderingKey != "order-1" {
				t.Fatalf("published %+v; want only the committed message, once", b.log)
			}
			if _, err := o.Add(ctx, db, outbox.Message{Topic: ""}); !errors.Is(err, outbox.ErrInvalidMessage) {
				t.Fatalf("empty topic: %v", err)
			}
		})
	}
}

// Four relays (on SQLite they serialize), writers adding messages
// for 20 keys while they run, and a crash between publish and mark in a
// quarter of the rounds: every message is published at least once, each key's
// messages first appear in order, and an inbox downstream applies each
// exactly once.
func TestRelaysCrashOrderAndDedup(t *testing.T) {
	for _, c := range dbs {
		t.Run(c.D.String(), func(t *testing.T) {
			db, o := setup(t, c.D, c.Open)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			b := &broker{failRate: 0.25, rng: rand.New(rand.NewPCG(1, 2))}
			var wg sync.WaitGroup
			for i := 0; i < 4; i++ {
				r, err := outbox.NewRelay(db, o, b, outbox.WithBatch(5), outbox.WithPoll(2*time.Millisecond))
				if err != nil {
					t.Fatal(err)
				}
				wg.Add(1)
				go func() { defer wg.Done(); _ = r.Run(ctx) }()
			}
			const keys, perKey = 20, 15
			var wwg sync.WaitGroup
			for w := 0; w < 4; w++ {
				wwg.Add(1)
				go func() {
					defer wwg.Done()
					for k := w; k < keys; k += 4 {
						for n := 0; n < perKey; n++ {
							m := outbox.Message{ID: fmt.Sprintf("k%d-%d", k, n), Topic: "t", OrderingKey: fmt.Sprint("k", k), Payload: []byte(fmt.Sprint(n))}
							if err := addRetrying(ctx, c.D, db, o, m); err != nil {
								t.Error(err)
								return
							}
						}
					}
				}()
			}
			wwg.Wait()
			deadline := time.Now().Add(60 * time.Second)
			for {
				var unsent int
				if err := db.QueryRow("SELECT COUNT(*) FROM idem_outbox WHERE sent_at IS NULL").Scan(&unsent); err != nil {
					t.Fatal(err)
				}
				if unsent == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d messages still unsent", unsent)
				}
				time.Sleep(20 * time.Millisecond)
			}
			cancel()
			wg.Wait()

			b.mu.Lock()
			log := append([]outbox.Message(nil), b.log...)
			b.mu.Unlock()
			next := map[string]int{} // per key: the next message that may first appear
			seen := map[string]bool{}
			dups := 0
			for _, m := range log {
				if seen[m.ID] {
					dups++
					continue
				}
				seen[m.ID] = true
				want := fmt.Sprintf("%s-%d", m.OrderingKey, next[m.OrderingKey])
				if m.ID != want {
					t.Fatalf("key %s: %s published before %s", m.OrderingKey, m.ID, want)
				}
				next[m.OrderingKey]++
			}
			if len(seen) != keys*perKey {
				t.Fatalf("published %d distinct messages, want %d", len(seen), keys*perKey)
			}
			if dups == 0 {
				t.Fatal("no republication happened: the crash injection did not bite")
			}
			// Downstream: an inbox absorbs the republications.
			sink := testenv.SQLite(t)
			in := inboxtest.Migrated(t, sink, sqldialect.SQLite, "downstream")
			if _, err := sink.Exec("CREATE TABLE applied (id TEXT PRIMARY KEY, n INTEGER NOT NULL DEFAULT 0)"); err != nil {
				t.Fatal(err)
			}
			for _, m := range log {
				if _, err := in.Process(context.Background(), m.ID, func(ctx context.Context, tx *sql.Tx) error {
					_, err := tx.ExecContext(ctx, "INSERT INTO applied (id, n) VALUES (?, 1) ON CONFLICT (id) DO UPDATE SET n = n + 1", m.ID)
					return err
				}); err != nil {
					t.Fatal(err)
				}
			}
			var rows, total int
			_ = sink.QueryRow("SELECT COUNT(*), COALESCE(SUM(n), 0) FROM applied").Scan(&rows, &total)
			if rows != keys*perKey || total != keys*perKey {
				t.Fatalf("downstream applied %d messages %d times; want %d once each (%d publications, %d duplicates)", rows, total, keys*perKey, len(log), dups)
			}
		})
	}
}

func TestSweep(t *testing.T) {
	for _, c := range dbs {
		t.Run(c.D.String(), func(t *testing.T) {
			db, o := setup(t, c.D, c.Open)
			ctx := context.Background()
			tx, _ := db.BeginTx(ctx, nil)
			for i := 0; i < 10; i++ {
				if _, err := o.Add(ctx, tx, outbox.Message{Topic: "t", OrderingKey: "k"}); err != nil {
					t.Fatal(err)
				}
			}
			_ = tx.Commit()
			r, _ := outbox.NewRelay(db, o, &broker{}, outbox.WithBatch(6))
			if _, err := r.RunOnce(ctx); err != nil { // 6 sent, 4 unsent
				t.Fatal(err)
			}
			back := "UPDATE idem_outbox SET sent_at = sent_at - 3600000 WHERE sent_at IS NOT NULL"
			if c.D == sqldialect.Postgres {
				back = "UPDATE idem_outbox SET sent_at = sent_at - interval '1 hour' WHERE sent_at IS NOT NULL"
			}
			if _, err := db.Exec(back); err != nil {
				t.Fatal(err)
			}
			n, err := o.Sweep(ctx, db, time.Minute, 4)
			if err != nil || n != 6 {
				t.Fatalf("swept %d (%v), want 6", n, err)
			}
			var left int
			_ = db.QueryRow("SELECT COUNT(*) FROM idem_outbox WHERE sent_at IS NULL").Scan(&left)
			if left != 4 {
				t.Fatalf("%d unsent left, want 4", left)
			}
		})
	}
}

// TestRelayDoesNotOvertakeAHeldMessage: relay A holds K's first message (its
// publisher is stuck); relay B must not publish K's second message before it,
// but may publish other keys.
func TestRelayDoesNotOvertakeAHeldMessage(t *testing.T) {
	db, o := setup(t, sqldialect.Postgres, testenv.Postgres)
	ctx := context.Background()
	tx, _ := db.BeginTx(ctx, nil)
	for _, m := range []outbox.Message{{ID: "K-0", OrderingKey: "K"}, {ID: "K-1", OrderingKey: "K"}, {ID: "X-0", OrderingKey: "X"}, {ID: "K-2", OrderingKey: "K"}} {
		m.Topic = "t"
		if _, err := o.Add(ctx, tx, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan []outbox.Message), make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	defer unblock() // a failing assertion must not leave A's transaction open
	stuck := outbox.PublisherFunc(func(ctx context.Context, msgs []outbox.Message) error {
		entered <- msgs
		<-release
		return nil
	})
	a, _ := outbox.NewRelay(db, o, stuck, outbox.WithBatch(1))
	done := make(chan error)
	go func() { _, err := a.RunOnce(ctx); done <- err }()
	if got := <-entered; len(got) != 1 || got[0].ID != "K-0" {
		t.Fatalf("relay A claimed %+v", got)
	}
	bb := &broker{}
	b, _ := outbox.NewRelay(db, o, bb)
	if _, err := b.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if len(bb.log) != 1 || bb.log[0].ID != "X-0" {
		unblock()
		<-done
		t.Fatalf("relay B published %v while K-0 was held by relay A; want only X-0", ids(bb.log))
	}
	unblock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := b.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got := ids(bb.log); fmt.Sprint(got) != "[X-0 K-1 K-2]" {
		t.Fatalf("relay B published %v, want [X-0 K-1 K-2]", got)
	}
}

func ids(ms []outbox.Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.ID)
	}
	return out
}

// A consumer that also publishes writes its outgoing message to the outbox
// in the transaction of its inbox row: a redelivery (the ack was lost after
// the commit) neither repeats the effect nor adds a second outgoing message,
// and a handler that fails after writing both leaves neither.
func TestConsumeTransformProduce(t *testing.T) {
	for _, c := range dbs {
		t.Run(c.D.String(), func(t *testing.T) {
			db, o := setup(t, c.D, c.Open)
			ctx := context.Background()
			in := inboxtest.Migrated(t, db, c.D, "stock")
			if _, err := db.Exec("CREATE TABLE stock (sku TEXT PRIMARY KEY, qty INT NOT NULL)"); err != nil {
				t.Fatal(err)
			}
			if _, err := db.Exec("INSERT INTO stock VALUES ('pen', 10)"); err != nil {
				t.Fatal(err)
			}
			fail := true
			handle := func(ctx context.Context, tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, "UPDATE stock SET qty = qty - 1 WHERE sku = 'pen'"); err != nil {
					return err
				}
				if _, err := o.Add(ctx, tx, outbox.Message{ID: "stock-reserved:order-7", Topic: "stock", OrderingKey: "pen"}); err != nil {
					return err
				}
				if fail {
					return errors.New("crashed after writing both")
				}
				return nil
			}
			if _, err := in.Process(ctx, "order-7", handle); err == nil {
				t.Fatal("want the handler's error")
			}
			fail = false
			for i := 0; i < 3; i++ { // the delivery, then two redeliveries
				if _, err := in.Process(ctx, "order-7", handle); err != nil {
					t.Fatal(err)
				}
			}
			b := &broker{}
			r, _ := outbox.NewRelay(db, o, b)
			if _, err := r.RunOnce(ctx); err != nil {
				t.Fatal(err)
			}
			var qty int
			_ = db.QueryRow("SELECT qty FROM stock").Scan(&qty)
			if qty != 9 || len(b.log) != 1 {
				t.Fatalf("stock %d, published %v; want 9 and one message", qty, ids(b.log))
			}
		})
	}
}

// addRetrying adds m in a transaction of its own, run again while the
// dialect calls its failure retryable, as an application does: on SQLite
// four relays polling every 2 ms hold the write lock so often that, on a
// loaded machine, a writer's BEGIN can wait out the 5 s busy timeout
// (SQLITE_BUSY; 1 run in 5 at load 10-16). The test's claims are the
// relays' order and dedup, not how long a writer waits for the lock.
func addRetrying(ctx context.Context, d sqldialect.Dialect, db *sql.DB, o *outbox.Outbox, m outbox.Message) error {
	add := func() error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := o.Add(ctx, tx, m); err != nil {
			return err
		}
		return tx.Commit()
	}
	guard := time.Now().Add(2 * time.Minute) // a hang guard, not a speed bound
	for {
		err := add()
		if err == nil || !d.Retryable(err) || time.Now().After(guard) {
			return err
		}
	}
}

// An idle relay on SQLite does not take the write lock: while the
// application holds it in a long transaction, a relay's round with nothing
// to send returns at once instead of waiting out the busy timeout (and
// failing with SQLITE_BUSY), and once a message is committed the next
// round publishes it.
func TestIdleRelayLeavesSQLiteWriteLock(t *testing.T) {
	db, o := setup(t, sqldialect.SQLite, dbtest.SQLite.Open)
	ctx := context.Background()
	b := &broker{}
	r, err := outbox.NewRelay(db, o, b)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil) // BEGIN IMMEDIATE: the write lock
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.Add(ctx, tx, outbox.Message{ID: "m1", Topic: "t", OrderingKey: "k", Payload: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	if n, err := r.RunOnce(ctx); n != 0 || err != nil {
		t.Fatalf("idle round while the application writes: %d, %v; want 0, nil", n, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if n, err := r.RunOnce(ctx); n != 1 || err != nil {
		t.Fatalf("round after the commit: %d, %v; want 1, nil", n, err)
	}
	if len(b.log) != 1 || b.log[0].ID != "m1" {
		t.Fatalf("published %+v", b.log)
	}
}
