package outbox_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/outbox"
	"github.com/idem-go/idem/sqldialect"
)

// The relay through a failover (issue 29): a primary with an asynchronous
// or a synchronous standby (StartPGHA), or an asynchronous one and the
// relay's WithWaitReplicas, a writer committing an order and
// its message in one transaction, a relay publishing them (busy at the
// kill); replication held back for a second, kill -9, promotion; both go
// on through the multi-host URL. Then on the new primary:
//   - every message whose order survived is published (never lost);
//   - published twice is the outbox's at-least-once (a mark lost with the
//     failover or with the connection): counted, not failed;
//   - published for an order the failover lost (a phantom: downstream saw
//     an event whose transaction is gone) happens only with asynchronous
//     replication; it fails the test under synchronous replication and
//     with WithWaitReplicas.
func TestRelayFailover(t *testing.T) {
	t.Parallel()
	for _, sc := range []struct {
		name string
		mode testenv.PGHAMode
		wait bool
	}{{"async", testenv.PGAsync, false}, {"sync", testenv.PGSync, false}, {"async + WaitReplicas(1)", testenv.PGAsync, true}} {
		name, mode := sc.name, sc.mode
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := relayFailover(t, mode, sc.wait)
			t.Logf("| relay, %s, busy at the kill | %d orders committed (writer told), %d of them gone | published: %d never, %d twice, %d phantoms |",
				name, r.told, r.toldGone, r.never, r.twice, r.phantom)
			if r.never > 0 {
				t.Errorf("%d messages of surviving orders never published", r.never)
			}
			if mode == testenv.PGSync && (r.phantom > 0 || r.toldGone > 0) {
				t.Errorf("synchronous: %d phantoms published, %d committed orders gone", r.phantom, r.toldGone)
			}
			if sc.wait && r.phantom > 0 {
				t.Errorf("WithWaitReplicas: %d phantoms published", r.phantom)
			}
		})
	}
}

type tlog struct{ t *testing.T }

func (l tlog) Write(b []byte) (int, error) { l.t.Log(string(b)); return len(b), nil }

type relayResult struct{ told, toldGone, never, twice, phantom int }

func relayFailover(t *testing.T, mode testenv.PGHAMode, wait bool) relayResult {
	h := testenv.StartPGHA(t, mode)
	db := testenv.Open(t, "pgx", h.URL())
	ctx, cancel := context.WithCancel(context.Background())
	o, err := outbox.New(sqldialect.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE orders (id text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	if err := h.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
	var (
		mu        sync.Mutex
		published = map[string]int{}
		told      = map[string]bool{}
	)
	pub := outbox.PublisherFunc(func(_ context.Context, msgs []outbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			published[m.ID]++
		}
		return nil
	})
	opts := []outbox.RelayOption{outbox.WithBatch(20), outbox.WithPoll(10 * time.Millisecond)}
	if wait {
		opts = append(opts, outbox.WithWaitReplicas(1, 5*time.Second), outbox.WithLogger(slog.New(slog.NewTextHandler(tlog{t}, nil))))
	}
	relay, err := outbox.NewRelay(db, o, pub, opts...)
	if err != nil {
		t.Fatal(err)
	}
	var wg, writer sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = relay.Run(ctx) }()
	var (
		n         atomic.Int64 // orders begun
		nTold     atomic.Int64
		stopWrite atomic.Bool
	)
	pubCount := func() int64 { mu.Lock(); defer mu.Unlock(); return int64(len(published)) }
	// Each attempt has a context of its own that the stop does not
	// cancel: a commit cancelled in flight can still commit on the server
	// after the drain below has seen the outbox empty, and its message
	// would then be counted as never published.
	write := func(id string) error {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		tx, err := db.BeginTx(wctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(wctx, `INSERT INTO orders (id) VALUES ($1)`, id); err != nil {
			return err
		}
		if _, err := o.Add(wctx, tx, outbox.Message{ID: id, Topic: "orders", Payload: []byte(id)}); err != nil {
			return err
		}
		return tx.Commit()
	}
	writer.Add(1)
	go func() { // the writer: one order every 5 ms, each retried until committed
		defer writer.Done()
		for !stopWrite.Load() {
			id := fmt.Sprintf("o%05d", n.Add(1))
			for !stopWrite.Load() {
				if err := write(id); err == nil {
					mu.Lock()
					told[id] = true
					mu.Unlock()
					nTold.Add(1)
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	defer func() { stopWrite.Store(true); cancel(); writer.Wait(); wg.Wait() }()
	// Busy before the kill: orders committed and the relay publishing.
	testenv.WaitFor(t, time.Minute, "200 orders committed and 100 published before the kill", func() bool { return nTold.Load() >= 200 && pubCount() >= 100 })
	h.HoldReplication()
	time.Sleep(time.Second) // commits the standby has not got
	h.KillPrimary()
	h.Promote()
	if wait { // the new primary's relay waits for a standby of its own
		if err := h.Rejoin(); err != nil {
			t.Fatal(err)
		}
	}
	after := nTold.Load()
	testenv.WaitFor(t, time.Minute, "50 orders committed on the new primary", func() bool { return nTold.Load() >= after+50 })
	// Stop writing, and wait for the write in flight to end; then the
	// relay drains the new primary's outbox.
	stopWrite.Store(true)
	writer.Wait()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var unsent int
		if db.QueryRow(`SELECT count(*) FROM idem_outbox WHERE sent_at IS NULL`).Scan(&unsent) == nil && unsent == 0 {
			break
		}
	}
	cancel()
	wg.Wait()
	survived := map[string]bool{}
	rows, err := db.Query(`SELECT id FROM orders`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		survived[id] = true
	}
	var r relayResult
	mu.Lock()
	defer mu.Unlock()
	for id := range told {
		r.told++
		if !survived[id] {
			r.toldGone++
		}
	}
	for id := range survived {
		if published[id] == 0 {
			r.never++
			var sent bool // marked sent, or left unsent by the drain
			if err := db.QueryRow(`SELECT sent_at IS NOT NULL FROM idem_outbox WHERE id = $1`, id).Scan(&sent); err != nil {
				t.Logf("never published %s: its outbox row: %v", id, err)
			} else {
				t.Logf("never published %s: marked sent: %v", id, sent)
			}
		}
	}
	for id, k := range published {
		if k > 1 {
			r.twice++
		}
		if !survived[id] {
			r.phantom++
		}
	}
	return r
}
