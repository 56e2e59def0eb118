package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/internal/testsupport/inboxtest"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/sqldialect"
)

func TestWaitReplicasOption(t *testing.T) {
	t.Parallel()
	for _, o := range []inbox.Option{inbox.WithWaitReplicas(-1, time.Second), inbox.WithWaitReplicas(1, 0)} {
		if _, err := inbox.New(&sql.DB{}, sqldialect.Postgres, "c", o); err == nil {
			t.Error("a bad WithWaitReplicas accepted")
		}
	}
	if _, err := inbox.New(&sql.DB{}, sqldialect.SQLite, "c", inbox.WithWaitReplicas(1, time.Second)); err == nil {
		t.Error("WithWaitReplicas accepted on SQLite, which has no standbys")
	}
}

// An asynchronous standby, replication held back: with WithWaitReplicas
// the inbox does not report a message applied (or a duplicate) until the
// standby has its commit, and reports an unknown outcome (CommitError
// wrapping ErrNotReplicated: do not ack) when the wait times out. The
// redelivery of such a message is a duplicate if the commit survived, and
// applies it once on the new primary if a failover lost it.
func TestWaitReplicasHeld(t *testing.T) {
	t.Parallel()
	h := testenv.StartPGHA(t, testenv.PGAsync)
	ctx := context.Background()
	db := testenv.Open(t, "pgx", h.URL())
	primary := testenv.Open(t, "pgx", h.PrimaryURL())
	if _, err := db.Exec(`CREATE TABLE effects (id text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	open := func(timeout time.Duration) *inbox.Inbox {
		in := inboxtest.Migrated(t, db, sqldialect.Postgres, "c", inbox.WithWaitReplicas(1, timeout), inbox.WithLayout(inbox.LayoutRows))
		return in
	}
	patient, hasty := open(time.Minute), open(300*time.Millisecond)
	count := func(q *sql.DB, id string) int {
		t.Helper()
		var n int
		if err := poll(func() error { return q.QueryRow(`SELECT count(*) FROM effects WHERE id = $1`, id).Scan(&n) }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	unknown := func(err error) bool {
		var ce *inbox.CommitError
		return errors.As(err, &ce) && errors.Is(err, sqldialect.ErrNotReplicated)
	}

	// Held: Process commits on the primary and waits; it answers once
	// replication resumes.
	h.HoldReplication()
	type result struct {
		applied bool
		err     error
	}
	done := make(chan result, 1)
	go func() {
		applied, err := patient.Process(ctx, "m1", effect("m1"))
		done <- result{applied, err}
	}()
	if err := poll(func() error {
		if count(primary, "m1") == 0 {
			return errors.New("not committed yet")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		t.Fatalf("Process answered (%v, %v) while the standby lacked its commit", r.applied, r.err)
	default:
	}
	h.ResumeReplication()
	if r := <-done; !r.applied || r.err != nil {
		t.Fatalf("after resuming: Process = %v, %v; want applied", r.applied, r.err)
	}

	// Held, short timeout: an unknown outcome, for the message and for
	// its duplicate (the key found is a commit the standby lacks); a
	// batch too.
	h.HoldReplication()
	if applied, err := hasty.Process(ctx, "m2", effect("m2")); !unknown(err) {
		t.Fatalf("Process with replication held: %v, %v; want a CommitError wrapping ErrNotReplicated", applied, err)
	}
	if applied, err := hasty.Process(ctx, "m2", effect("m2")); !unknown(err) {
		t.Fatalf("a duplicate of an unreplicated commit: %v, %v; want a CommitError wrapping ErrNotReplicated", applied, err)
	}
	batch := []inbox.Message{{Key: "b1"}, {Key: "b2"}}
	if _, err := hasty.ProcessBatch(ctx, batch, func(ctx context.Context, tx *sql.Tx, m inbox.Message) error {
		return effect(m.Key)(ctx, tx)
	}); !unknown(err) {
		t.Fatalf("ProcessBatch with replication held: %v; want a CommitError wrapping ErrNotReplicated", err)
	}
	// No failover: the redelivery is a duplicate once the standby has it.
	h.ResumeReplication()
	if applied, err := hasty.Process(ctx, "m2", effect("m2")); applied || err != nil {
		t.Fatalf("redelivery after resuming: %v, %v; want a duplicate", applied, err)
	}

	// A failover that loses the commit: the redelivery applies it once.
	h.HoldReplication()
	if _, err := hasty.Process(ctx, "m3", effect("m3")); !unknown(err) {
		t.Fatalf("Process with replication held: %v; want an unknown outcome", err)
	}
	h.KillPrimary()
	h.Promote()
	// The new primary has no standby: an inbox that waits for one would
	// wait as long as it has none (like a synchronous primary without its
	// standby). The redelivery goes through one that does not wait.
	plain, err := inbox.New(db, sqldialect.Postgres, "c", inbox.WithLayout(inbox.LayoutRows))
	if err != nil {
		t.Fatal(err)
	}
	var applied bool
	if err := poll(func() (err error) { applied, err = plain.Process(ctx, "m3", effect("m3")); return err }); err != nil {
		t.Fatal(err)
	}
	if !applied {
		t.Error("redelivery on the new primary: a duplicate, but the failover lost the commit")
	}
	for id, want := range map[string]int{"m1": 1, "m2": 1, "m3": 1, "b1": 1, "b2": 1} {
		if n := count(db, id); n != want {
			t.Errorf("new primary: %s applied %d times, want %d", id, n, want)
		}
	}
}

// BenchmarkWaitReplicas measures what WithWaitReplicas(1, …) costs on a
// primary with one asynchronous standby (fsync on, loopback): Process by 4
// workers, 1,000 messages a round, 6 rounds, alternating which variant
// goes first. Run it once: go test -run '^$' -bench WaitReplicas
// -benchtime 1x ./inbox. It reports messages/s and the p50 and p99 of one
// Process for each variant.
func BenchmarkWaitReplicas(b *testing.B) {
	h := testenv.StartPGHA(b, testenv.PGAsync)
	ctx := context.Background()
	db := testenv.Open(b, "pgx", h.URL())
	db.SetMaxIdleConns(16)
	if _, err := db.Exec(`CREATE TABLE effects (id text PRIMARY KEY)`); err != nil {
		b.Fatal(err)
	}
	variants := map[string][]inbox.Option{"plain": nil, "wait": {inbox.WithWaitReplicas(1, 10*time.Second)}}
	inboxes := map[string]*inbox.Inbox{}
	for name, opts := range variants {
		in := inboxtest.Migrated(b, db, sqldialect.Postgres, "bench-"+name, append(opts, inbox.WithLayout(inbox.LayoutRows), inbox.WithTable("inbox_"+name))...)
		inboxes[name] = in
	}
	const rounds, perRound, workers = 6, 1000, 4
	lat := map[string][]time.Duration{}
	took := map[string]time.Duration{}
	seq := 0
	b.ResetTimer()
	for round := range rounds {
		order := []string{"plain", "wait"}
		if round%2 == 1 {
			order = []string{"wait", "plain"}
		}
		for _, name := range order {
			in := inboxes[name]
			ids := make(chan string, perRound)
			for range perRound {
				seq++
				ids <- fmt.Sprint(name, seq)
			}
			close(ids)
			var mu sync.Mutex
			var wg sync.WaitGroup
			start := time.Now()
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for id := range ids {
						t0 := time.Now()
						if _, err := in.Process(ctx, id, effect(id)); err != nil {
							b.Error(err)
							return
						}
						d := time.Since(t0)
						mu.Lock()
						lat[name] = append(lat[name], d)
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			took[name] += time.Since(start)
		}
	}
	b.StopTimer()
	for _, name := range []string{"plain", "wait"} {
		l := lat[name]
		slices.Sort(l)
		b.ReportMetric(float64(len(l))/took[name].Seconds(), name+"-msgs/s")
		b.ReportMetric(float64(l[len(l)/2].Microseconds())/1000, name+"-p50-ms")
		b.ReportMetric(float64(l[len(l)*99/100].Microseconds())/1000, name+"-p99-ms")
	}
}

func effect(id string) inbox.Handler {
	return func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO effects VALUES ($1)`, id)
		return err
	}
}
