package failoverprobe_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/internal/testsupport/inboxtest"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/sqlstore"
	"github.com/idem-go/idem/sqldialect"
)

// scenario is one row of the probe's table.
type scenario struct {
	name   string
	mode   testenv.PGHAMode
	layout inbox.Layout
	batch  bool // ProcessBatch (batches of batchSize) instead of Process
	wait   bool // inbox and key store WithWaitReplicas(1, waitFor)
	fault  fault
	// patroni runs the scenario on StartPatroni (3 members; mode PGSync is
	// synchronous_mode) instead of StartPGHA: a real failure detection,
	// no replication held back.
	patroni bool
}

// fault is how the primary goes away.
type fault int

const (
	// faultKill holds replication back for holdFor, then kills the
	// primary with SIGKILL and promotes the standby.
	faultKill fault = iota
	// faultCut cuts the standby off (replication held, never resumed)
	// for cutFor, longer than wal_sender_timeout (5 s), so that the
	// primary drops it from pg_stat_replication; then the kill.
	faultCut
	// faultSwitchover stops the primary cleanly (fast shutdown), waits
	// until the standby has received everything, and promotes it.
	faultSwitchover
)

func (f fault) String() string {
	return [...]string{"kill -9 after 1 s of lag", "standby cut off 6 s, then kill -9", "clean switchover"}[f]
}

// load is how much goes through a scenario, and how fast: the messages
// and keys are paced so that the failover falls in the middle of the load.
type load struct {
	messages, keys int
	rate, keyRate  float64 // per second
}

const (
	workers   = 4
	batchSize = 20
	holdFor   = time.Second // replication held back before the kill
	cutFor    = 6 * time.Second
	waitFor   = 5 * time.Second // WithWaitReplicas's timeout
	lease     = 2 * time.Second
)

// TestFailoverProbe: a primary and a streaming standby; an inbox consumer
// (4 workers, acknowledging after COMMIT returns, redelivering what was not
// acknowledged) and 4 key-store callers (Reserve, the effect, Complete;
// Reserve again after an error) run at a steady rate; 40% of the way in
// replication is held back for 1 s, the primary is killed with SIGKILL and
// the standby promoted; the load goes on through the multi-host URL. Then
// every key is reserved once more (a client's retry) and the effects are
// counted on the new primary.
//
// It fails on what must never happen whatever the replication: an inbox
// effect applied twice, a fencing token handed out again or lower for a
// key; and, under synchronous replication, an acknowledged message lost or
// a completed key forgotten. Under asynchronous replication the lost
// messages and forgotten completions are reported, not failed: they are
// what that setting costs (docs/ha.md).
func TestFailoverProbe(t *testing.T) {
	t.Parallel()
	scenarios := []scenario{
		named(scenario{mode: testenv.PGAsync, layout: inbox.LayoutRows}),
		named(scenario{mode: testenv.PGSync, layout: inbox.LayoutBuckets, batch: true}),
		named(scenario{mode: testenv.PGAsync, layout: inbox.LayoutRows, wait: true}),
	}
	l := load{messages: 400, keys: 200, rate: 200, keyRate: 100}
	if os.Getenv("IDEM_FAILOVER_LONG") == "1" {
		scenarios = all()
		l = load{messages: 20000, keys: 2000, rate: 1000, keyRate: 100}
	} else if testing.Short() {
		t.Skip("-short: the failover probe starts a primary and a standby per scenario")
	}
	if only := os.Getenv("IDEM_FAILOVER_ONLY"); only != "" {
		re := regexp.MustCompile(only)
		var kept []scenario
		for _, sc := range all() {
			if re.MatchString(sc.name) {
				kept = append(kept, sc)
			}
		}
		scenarios = kept
	}
	var (
		mu   sync.Mutex
		rows []string
	)
	t.Run("scenarios", func(t *testing.T) {
		for _, sc := range scenarios {
			t.Run(strings.NewReplacer(", ", "_", " ", "").Replace(sc.name), func(t *testing.T) {
				if os.Getenv("IDEM_FAILOVER_LONG") != "1" && os.Getenv("IDEM_FAILOVER_ONLY") == "" {
					t.Parallel() // the long and selected runs go one at a time: the numbers are the point
				}
				r := probe(t, sc, l)
				mu.Lock()
				rows = append(rows, r.row(sc, l))
				mu.Unlock()
			})
		}
	})
	t.Logf("\n| scenario | inbox: acknowledged, effect gone | inbox: effect applied twice | key store: effect ran twice (completion forgotten + crash window) | key store: tokens reused / lower | outage | promotion |\n|---|---|---|---|---|---|---|\n%s", strings.Join(rows, "\n"))
}

// all is every scenario: the long run's list, and what IDEM_FAILOVER_ONLY
// (a regular expression on the name) selects from.
func all() []scenario {
	var scenarios []scenario
	for _, f := range []fault{faultKill, faultCut, faultSwitchover} {
		for _, m := range []testenv.PGHAMode{testenv.PGAsync, testenv.PGSync, waitMode} {
			for _, lay := range []inbox.Layout{inbox.LayoutRows, inbox.LayoutBuckets} {
				for _, b := range []bool{false, true} {
					if f != faultKill && (lay != inbox.LayoutRows || b) {
						continue // one inbox path is enough for the other faults
					}
					sc := scenario{mode: m, layout: lay, batch: b, fault: f}
					if m == waitMode {
						sc.mode, sc.wait = testenv.PGAsync, true
					}
					scenarios = append(scenarios, named(sc))
				}
			}
		}
	}
	for _, f := range []fault{faultKill, faultSwitchover} {
		for _, m := range []testenv.PGHAMode{testenv.PGAsync, testenv.PGSync, waitMode} {
			sc := scenario{mode: m, layout: inbox.LayoutRows, fault: f, patroni: true}
			if m == waitMode {
				sc.mode, sc.wait = testenv.PGAsync, true
			}
			scenarios = append(scenarios, named(sc))
		}
	}
	return scenarios
}

// waitMode stands for asynchronous replication with WithWaitReplicas in
// the long run's loop.
const waitMode testenv.PGHAMode = -1

// named sets sc's name from its settings.
func named(sc scenario) scenario {
	s := "async"
	switch {
	case sc.mode == testenv.PGSync:
		s = "sync"
	case sc.wait:
		s = "async + WaitReplicas(1)"
	}
	if sc.layout == inbox.LayoutRows {
		s += ", rows"
	} else {
		s += ", buckets"
	}
	if sc.batch {
		s += ", ProcessBatch"
	} else {
		s += ", Process"
	}
	switch {
	case sc.patroni && sc.fault == faultKill:
		s += ", kill -9 of the leader"
	case sc.fault != faultKill:
		s += ", " + sc.fault.String()
	}
	if sc.patroni {
		s = "Patroni: " + s
	}
	sc.name = s
	return sc
}

// result is what a scenario measured.
type result struct {
	acked, lost, doubled   int
	forgotten, crashWindow int // key store: effect ran twice
	reused, lower          int // key store: a key's token handed to it again, or lower than its previous one
	shared                 int // key store: tokens also handed to another key (not a fencing violation)
	outage, promote        time.Duration
}

func (r result) row(sc scenario, l load) string {
	return fmt.Sprintf("| %s; %d messages, %d keys | %d of %d acked | %d | %d + %d | %d / %d | %v | %v |",
		sc.name, l.messages, l.keys, r.lost, r.acked, r.doubled, r.forgotten, r.crashWindow, r.reused, r.lower,
		r.outage.Round(10*time.Millisecond), r.promote.Round(10*time.Millisecond))
}

// run is the state shared by a scenario's workers.
type run struct {
	kill  atomic.Int64 // UnixNano when the kill began
	dead  atomic.Int64 // UnixNano when the primary was dead (reaped); 0 before
	first atomic.Int64 // UnixNano of the first commit begun after dead that succeeded
	acked []atomic.Bool

	mu        sync.Mutex
	ran       []int      // key store: how many times each key's effect ran
	completed []bool     // key store: Complete returned nil
	forgot    []bool     // key store: acquired again after Complete returned nil
	tokens    [][]uint64 // key store: each key's tokens, in order
}

// succeeded notes a commit begun at began that succeeded: the first one
// begun once the old primary was dead ends the outage, measured from the
// kill. (One begun between the kill's start and the process's death may
// still have committed on the old primary.)
func (r *run) succeeded(began time.Time) {
	k := r.dead.Load()
	if k != 0 && began.UnixNano() > k {
		r.first.CompareAndSwap(0, time.Now().UnixNano())
	}
}

// cluster is the high-availability setup a scenario runs on.
type cluster interface {
	URL() string
	WaitReplicated(ctx context.Context) error
}

func probe(t *testing.T, sc scenario, l load) result {
	var (
		h  *testenv.PGHA
		pt *testenv.Patroni
		c  cluster
	)
	if sc.patroni {
		pt = testenv.StartPatroni(t, 3, sc.mode == testenv.PGSync)
		c = pt
	} else {
		h = testenv.StartPGHA(t, sc.mode)
		c = h
	}
	db := testenv.Open(t, "pgx", c.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var hazards []string
	// The start-up warning: the inbox logs the replication hazards at
	// Warn, the key store hands them to WithReplicationCheck's function.
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelWarn}))
	inOpts := []inbox.Option{inbox.WithLayout(sc.layout), inbox.WithRetention(time.Hour), inbox.WithLogger(log)}
	ksOpts := []sqlstore.Option{sqlstore.WithReplicationCheck(func(r sqldialect.Replication) { hazards = r.Hazards })}
	if sc.wait {
		inOpts = append(inOpts, inbox.WithWaitReplicas(1, waitFor))
		ksOpts = append(ksOpts, sqlstore.WithWaitReplicas(1, waitFor))
	}
	in := inboxtest.Migrated(t, db, sqldialect.Postgres, "probe", inOpts...)
	ks, err := sqlstore.New(db, sqldialect.Postgres, ksOpts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := ks.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	// Under Patroni's synchronous_mode with 3 members one standby stays
	// asynchronous: CheckReplication warns, though Patroni never promotes
	// that one. The warning is checked on StartPGHA only.
	async := sc.mode == testenv.PGAsync
	if warned := strings.Contains(logged.String(), "asynchronous"); !sc.patroni && (warned != async || (len(hazards) > 0) != async) {
		t.Errorf("asynchronous standby %v: the inbox logged %q, the key store's check got %q", async, logged.String(), hazards)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE probe_effects (id int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}

	r := &run{acked: make([]atomic.Bool, l.messages), ran: make([]int, l.keys), completed: make([]bool, l.keys),
		forgot: make([]bool, l.keys), tokens: make([][]uint64, l.keys)}
	var wg sync.WaitGroup
	msgs := make(chan []int, 64)
	keys := make(chan []int, 64)
	start := time.Now()
	wg.Add(2)
	go func() { defer wg.Done(); pace(ctx, start, l.messages, l.rate, sc.batch, msgs) }()
	go func() { defer wg.Done(); pace(ctx, start, l.keys, l.keyRate, false, keys) }()
	for range workers {
		wg.Add(2)
		go func() { defer wg.Done(); consume(ctx, in, sc.batch, msgs, r) }()
		go func() { defer wg.Done(); callKeys(ctx, ks, keys, r) }()
	}

	// 40% of the way in: the fault, then the promotion.
	planned := time.Duration(float64(l.messages) / l.rate * float64(time.Second))
	time.Sleep(time.Until(start.Add(planned * 4 / 10)))
	var res result
	if sc.patroni {
		res.promote = failPatroni(t, pt, sc, r)
	} else {
		res.promote = failPGHA(t, h, sc, r)
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		t.Fatalf("the load did not finish: %v", err)
	}
	if f := r.first.Load(); f != 0 {
		res.outage = time.Duration(f - r.kill.Load())
	}

	// A client's retry of every key, on the new primary.
	for k := range l.keys {
		reserveUntilDone(ctx, ks, k, r)
	}
	effects := map[int]int{}
	rs, err := db.QueryContext(ctx, `SELECT id, count(*) FROM probe_effects GROUP BY id`)
	if err != nil {
		t.Fatal(err)
	}
	for rs.Next() {
		var id, n int
		if err := rs.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		effects[id] = n
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	for id := range l.messages {
		if r.acked[id].Load() {
			res.acked++
			if effects[id] == 0 {
				res.lost++
			}
		}
		if effects[id] > 1 {
			res.doubled++
		}
	}
	seen := map[uint64]int{} // token -> keys that had it
	for k := range l.keys {
		if r.ran[k] > 1 {
			if r.forgot[k] {
				res.forgotten++
			} else {
				res.crashWindow++
			}
		}
		mine := map[uint64]bool{}
		for i, tok := range r.tokens[k] {
			switch {
			case mine[tok]:
				res.reused++
			case i > 0 && tok < r.tokens[k][i-1]:
				res.lower++
			}
			if !mine[tok] {
				seen[tok]++
			}
			mine[tok] = true
		}
	}
	for _, n := range seen {
		res.shared += n - 1
	}
	t.Logf("%s (tokens shared by two keys: %d)", res.row(sc, l), res.shared)

	if res.doubled > 0 {
		t.Errorf("%d inbox effects applied twice", res.doubled)
	}
	if res.reused > 0 || res.lower > 0 {
		t.Errorf("fencing tokens: %d handed to their key again, %d lower than the key's previous one", res.reused, res.lower)
	}
	if (sc.mode == testenv.PGSync || sc.wait || sc.fault == faultSwitchover) && (res.lost > 0 || res.forgotten > 0) {
		t.Errorf("%s: %d acknowledged messages lost, %d completed keys forgotten", sc.name, res.lost, res.forgotten)
	}
	if res.acked != l.messages {
		t.Errorf("%d of %d messages acknowledged", res.acked, l.messages)
	}
	return res
}

// failPGHA runs sc's fault on h and promotes the standby; it returns how
// long the promotion took. With WithWaitReplicas the new primary takes
// writes only once a standby streams from it: the old primary rejoins as
// one (a fresh base backup), and the outage includes that.
func failPGHA(t *testing.T, h *testenv.PGHA, sc scenario, r *run) time.Duration {
	switch sc.fault {
	case faultKill, faultCut:
		h.HoldReplication()
		if sc.fault == faultCut {
			time.Sleep(cutFor)
		} else {
			time.Sleep(holdFor)
		}
		r.kill.Store(time.Now().UnixNano())
		h.KillPrimary()
	case faultSwitchover:
		r.kill.Store(time.Now().UnixNano())
		if err := h.StopPrimary(); err != nil {
			t.Fatal(err)
		}
	}
	r.dead.Store(time.Now().UnixNano())
	promote := h.Promote()
	if sc.wait {
		began := time.Now()
		if err := h.Rejoin(); err != nil {
			t.Fatalf("rejoin: %v", err)
		}
		t.Logf("the old primary rejoined as a standby in %v", time.Since(began).Round(10*time.Millisecond))
	}
	return promote
}

// pace sends 0..n-1 to out at rate per second (in batches of batchSize if
// batch), then closes out.
func pace(ctx context.Context, start time.Time, n int, rate float64, batch bool, out chan []int) {
	defer close(out)
	size := 1
	if batch {
		size = batchSize
	}
	for next := 0; next < n; {
		due := min(n, int(time.Since(start).Seconds()*rate)+size)
		for next+size <= due || (next < n && due == n) {
			end := min(next+size, n)
			b := make([]int, 0, end-next)
			for i := next; i < end; i++ {
				b = append(b, i)
			}
			select {
			case out <- b:
			case <-ctx.Done():
				return
			}
			next = end
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// consume is one inbox worker: it processes what it receives until it is
// acknowledged, redelivering (at once, after a short pause) what failed.
func consume(ctx context.Context, in *inbox.Inbox, batch bool, msgs <-chan []int, r *run) {
	effect := func(ctx context.Context, tx *sql.Tx, id int) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO probe_effects (id) VALUES ($1)`, id)
		return err
	}
	for b := range msgs {
		pending := b
		for len(pending) > 0 && ctx.Err() == nil {
			began := time.Now()
			if !batch {
				id := pending[0]
				_, err := in.Process(ctx, fmt.Sprint("m", id), func(ctx context.Context, tx *sql.Tx) error { return effect(ctx, tx, id) })
				if err != nil {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				r.acked[id].Store(true) // the ack, after COMMIT returned
				r.succeeded(began)
				pending = nil
				continue
			}
			ms := make([]inbox.Message, len(pending))
			for i, id := range pending {
				ms[i] = inbox.Message{Key: fmt.Sprint("m", id), Value: id}
			}
			res, err := in.ProcessBatch(ctx, ms, func(ctx context.Context, tx *sql.Tx, m inbox.Message) error {
				return effect(ctx, tx, m.Value.(int))
			})
			if err != nil {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			var again []int
			for i, x := range res {
				if x.Err != nil {
					again = append(again, pending[i])
					continue
				}
				r.acked[pending[i]].Store(true)
			}
			r.succeeded(began)
			pending = again
		}
	}
}

// callKeys is one key-store caller: for each key, Reserve, run the effect,
// Complete; after an error, Reserve again (a takeover once the lease
// expires runs the effect again: the documented crash window).
func callKeys(ctx context.Context, ks *sqlstore.Store, keys <-chan []int, r *run) {
	for b := range keys {
		reserveUntilDone(ctx, ks, b[0], r)
	}
}

func reserveUntilDone(ctx context.Context, ks *sqlstore.Store, k int, r *run) {
	key := fmt.Sprint("k", k)
	for ctx.Err() == nil {
		began := time.Now()
		c, err := ks.Reserve(ctx, key, nil, lease)
		if err != nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		switch c.State {
		case keystore.Done:
			return
		case keystore.InProgress:
			time.Sleep(100 * time.Millisecond)
			continue
		}
		r.mu.Lock()
		r.ran[k]++ // the effect
		if r.completed[k] {
			r.forgot[k] = true
		}
		r.tokens[k] = append(r.tokens[k], c.Token)
		r.mu.Unlock()
		if err := ks.Complete(ctx, c, []byte("ok"), time.Hour); err != nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		r.mu.Lock()
		r.completed[k] = true
		r.mu.Unlock()
		r.succeeded(began)
		return
	}
}
