package inbox

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/inbox/internal/engine/bucket"
	"github.com/idem-go/idem/inbox/internal/engine/runs"
	"github.com/idem-go/idem/internal/testsupport/dbtest"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/sqldialect"
	_ "modernc.org/sqlite"
)

// Tests of the SQLite runs (package internal/engine/runs): they try to lose or double a key
// across a flush, a merge, a second process, a crash and retention. Flushes
// and merges are made small and frequent.

const runsCrashEnv = "IDEM_INBOX_RUNS_CRASH"

func init() {
	// The crash test's child: this test binary, re-executed. It runs
	// before TestMain and never returns.
	if os.Getenv(runsCrashEnv) != "" {
		runsCrashChild()
	}
}

func smallRuns(t *testing.T, flush, fanout int) {
	t.Helper()
	f0, n0 := runs.FlushKeys, runs.Fanout
	runs.FlushKeys, runs.Fanout = flush, fanout
	t.Cleanup(func() { runs.FlushKeys, runs.Fanout = f0, n0 })
}

func openRunsDB(t testing.TB, path string) *sql.DB {
	t.Helper()
	db := testenv.Open(t, "sqlite", sqldialect.SQLiteDSN(path))
	db.SetMaxOpenConns(1)
	return db
}

// runsFixture is an Inbox on a fresh file with an effects table: each
// applied key adds a row, so a key applied twice fails its primary key and
// a lost key shows as a missing row.
func runsFixture(t *testing.T, path string, opts ...Option) (*sql.DB, *Inbox) {
	t.Helper()
	db := openRunsDB(t, path)
	in, err := New(db, sqldialect.SQLite, "c", opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := in.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS effects (k TEXT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	return db, in
}

func effect(ctx context.Context, tx *sql.Tx, m Message) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO effects (k) VALUES (?)`, m.Key)
	return err
}

// deliver runs keys through ProcessBatch in batches and returns how many
// were applied.
func deliver(t testing.TB, in *Inbox, keys []string, batch int, fp []byte) int {
	t.Helper()
	applied := 0
	for lo := 0; lo < len(keys); lo += batch {
		var msgs []Message
		for _, k := range keys[lo:min(lo+batch, len(keys))] {
			msgs = append(msgs, Message{Key: k, Fingerprint: fp})
		}
		res, err := in.ProcessBatch(context.Background(), msgs, effect)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil && !errors.Is(r.Err, idem.ErrFingerprintMismatch) {
				t.Fatalf("key %s: %v", r.Key, r.Err)
			}
			if r.Applied {
				applied++
			}
		}
	}
	return applied
}

func randomKeys(n int, prefix string) []string {
	keys := make([]string, n)
	for i := range keys {
		var b [8]byte
		_, _ = rand.Read(b[:])
		keys[i] = fmt.Sprintf("%s-%d-%x", prefix, i, b)
	}
	return keys
}

// runTablesOf lists the run tables of idem_inbox in the file.
func runTablesOf(t testing.TB, db *sql.DB) []string {
	return tablesLike(t, db, "idem_inbox_k*_r*")
}

// tablesLike lists the tables whose name matches the GLOB pattern.
func tablesLike(t testing.TB, db *sql.DB, glob string) []string {
	t.Helper()
	return dbtest.Strings(t, db, `SELECT name FROM sqlite_master WHERE type = 'table' AND name GLOB ?`, glob)
}

// checkExactlyOnce checks that every key is recorded once across the hot
// tables and runs, and that the effects are exactly the recorded keys.
func checkExactlyOnce(t testing.TB, db *sql.DB) int {
	t.Helper()
	var tabs []string
	for _, n := range tablesLike(t, db, "idem_inbox_k[0-9]*") {
		tabs = append(tabs, "SELECT d FROM "+n)
	}
	var total, distinct, effects int
	q := `SELECT count(*), count(DISTINCT d) FROM (` + strings.Join(tabs, " UNION ALL ") + `)`
	if err := db.QueryRow(q).Scan(&total, &distinct); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`SELECT count(*) FROM effects`).Scan(&effects); err != nil {
		t.Fatal(err)
	}
	if total != distinct || total != effects {
		t.Fatalf("%d keys recorded, %d distinct, %d effects: a key is doubled or lost", total, distinct, effects)
	}
	return total
}

// TestRunsDuplicateAcrossFlushAndMerge: keys delivered, flushed into runs,
// merged across tiers, then redelivered: every redelivery is a duplicate,
// and a changed fingerprint is still caught in a merged run.
func TestRunsDuplicateAcrossFlushAndMerge(t *testing.T) {
	smallRuns(t, 64, 4)
	db, in := runsFixture(t, filepath.Join(t.TempDir(), "r.db"), WithBucketWidth(time.Hour))
	keys := randomKeys(3000, "k")
	if got := deliver(t, in, keys, 50, []byte("fp")); got != len(keys) {
		t.Fatalf("first delivery applied %d of %d", got, len(keys))
	}
	tables := runTablesOf(t, db)
	merged := 0
	for _, r := range tables {
		if runs.Merged("idem_inbox", r) {
			merged++
		}
	}
	if len(tables) == 0 || merged == 0 {
		t.Fatalf("runs %v: want flushed and merged runs", tables)
	}
	if got := deliver(t, in, keys, 37, []byte("fp")); got != 0 {
		t.Fatalf("redelivery applied %d keys", got)
	}
	// One at a time too, through Process, and with another fingerprint.
	for _, k := range keys[:100] {
		ok, err := in.ProcessMessage(context.Background(), Message{Key: k, Fingerprint: []byte("other")}, func(context.Context, *sql.Tx) error { return nil })
		if ok || !errors.Is(err, idem.ErrFingerprintMismatch) {
			t.Fatalf("key %s: applied=%v err=%v, want a fingerprint mismatch", k, ok, err)
		}
	}
	checkExactlyOnce(t, db)
}

// TestRunsSecondProcess: two *sql.DB on one file, two Inbox values, each
// flushing and merging runs the other must find; concurrently, overlapping
// keys: every key applied once.
func TestRunsSecondProcess(t *testing.T) {
	smallRuns(t, 50, 3)
	path := filepath.Join(t.TempDir(), "r.db")
	db, a := runsFixture(t, path, WithBucketWidth(time.Hour))
	_, b := runsFixture(t, path)
	keys := randomKeys(2000, "k")
	if got := deliver(t, a, keys[:1000], 40, nil); got != 1000 {
		t.Fatalf("a applied %d", got)
	}
	if got := deliver(t, b, keys[:1000], 30, nil); got != 0 {
		t.Fatalf("b applied %d keys a recorded", got)
	}
	if got := deliver(t, b, keys[1000:], 40, nil); got != 1000 {
		t.Fatalf("b applied %d", got)
	}
	if got := deliver(t, a, keys, 45, nil); got != 0 {
		t.Fatalf("a applied %d keys b recorded", got)
	}
	// Both at once, on overlapping keys, each in its own order.
	more := randomKeys(3000, "m")
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	for i, in := range []*Inbox{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ks := append([]string(nil), more...)
			if i == 1 {
				for l, r := 0, len(ks)-1; l < r; l, r = l+1, r-1 {
					ks[l], ks[r] = ks[r], ks[l]
				}
			}
			n := deliver(t, in, ks, 25, nil)
			mu.Lock()
			total += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	if total != len(more) {
		t.Fatalf("%d of %d keys applied by the two", total, len(more))
	}
	if n := checkExactlyOnce(t, db); n != len(keys)+len(more) {
		t.Fatalf("%d keys recorded, want %d", n, len(keys)+len(more))
	}
}

// runsCrashChild delivers keys with small runs until the hook kills it
// with SIGKILL at the chosen stage of the chosen flush or merge. It prints
// each batch's keys once committed.
func runsCrashChild() {
	runs.FlushKeys, runs.Fanout = 40, 3
	db, err := sql.Open("sqlite", sqldialect.SQLiteDSN(os.Getenv("IDEM_INBOX_RUNS_PATH")))
	if err != nil {
		panic(err)
	}
	db.SetMaxOpenConns(1)
	in, err := New(db, sqldialect.SQLite, "c", WithBucketWidth(time.Hour))
	if err != nil {
		panic(err)
	}
	stage := os.Getenv(runsCrashEnv)
	nth, _ := strconv.Atoi(os.Getenv("IDEM_INBOX_RUNS_NTH"))
	seen := 0
	runs.TestHook = func(s string) {
		if s == stage {
			if seen++; seen == nth {
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				time.Sleep(time.Second)
			}
		}
	}
	prefix := os.Getenv("IDEM_INBOX_RUNS_PREFIX")
	defer os.Exit(2) // the stage never came: the parent fails, it does not hang
	for i := 0; i < 2000; i++ {
		var msgs []Message
		for j := range 20 {
			msgs = append(msgs, Message{Key: fmt.Sprintf("%s-%d-%d", prefix, i, j)})
		}
		if _, err := in.ProcessBatch(context.Background(), msgs, effect); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		for _, m := range msgs {
			fmt.Println(m.Key)
		}
	}
}

// TestRunsCrashMidFlushOrMerge kills (SIGKILL) a child process in the
// middle of a flush or a merge (the run written, the hot rows or merged
// runs not yet deleted, the transaction open), then reopens the file: every
// key the child committed is a duplicate, none is recorded twice, and
// delivery goes on, through more crashes.
func TestRunsCrashMidFlushOrMerge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "crash.db")
	db, in := runsFixture(t, path, WithBucketWidth(time.Hour))
	var committed []string
	for i, c := range []struct {
		stage string
		nth   int
	}{{"flush", 3}, {"merge", 1}, {"commit", 2}, {"merge", 2}, {"flush", 1}} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), runsCrashEnv+"="+c.stage, "IDEM_INBOX_RUNS_NTH="+strconv.Itoa(c.nth),
			"IDEM_INBOX_RUNS_PATH="+path, "IDEM_INBOX_RUNS_PREFIX=c"+strconv.Itoa(i))
		out, err := cmd.Output()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("child %d (%s #%d): %v, want SIGKILL; stderr %s", i, c.stage, c.nth, err, errOut(err))
		}
		keys := strings.Fields(string(out))
		if len(keys) == 0 {
			t.Fatalf("child %d committed nothing", i)
		}
		committed = append(committed, keys...)
		checkExactlyOnce(t, db)
		if got := deliver(t, in, committed, 33, nil); got != 0 {
			t.Fatalf("after crash %d (%s #%d): %d committed keys applied again", i, c.stage, c.nth, got)
		}
		if len(runTablesOf(t, db)) == 0 {
			t.Fatalf("after crash %d: no runs", i)
		}
	}
	// The parent goes on with small runs over what the children left.
	smallRuns(t, 40, 3)
	fresh := randomKeys(500, "p")
	if got := deliver(t, in, fresh, 20, nil); got != len(fresh) {
		t.Fatalf("applied %d of %d fresh keys", got, len(fresh))
	}
	if got := deliver(t, in, append(committed, fresh...), 50, nil); got != 0 {
		t.Fatalf("%d keys applied twice", got)
	}
	checkExactlyOnce(t, db)
}

func errOut(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(ee.Stderr)
	}
	return ""
}

// TestRunsSealedBucketAndRetention: a bucket whose time has passed is merged
// into one run; Sweep drops expired buckets with their runs and never a key
// younger than the horizon (its redelivery stays a duplicate).
func TestRunsSealedBucketAndRetention(t *testing.T) {
	smallRuns(t, 30, 3)
	w := runsWidth(t)
	db, in := runsFixture(t, filepath.Join(t.TempDir(), "r.db"), WithBucketWidth(w), WithRedeliveryHorizon(3*w))
	time.Sleep(w - time.Duration(time.Now().UnixNano())%w + 50*time.Millisecond)
	old := randomKeys(400, "old")
	deliver(t, in, old, 20, nil)
	oldBucket := state(in).Current()
	time.Sleep(5 * w / 2) // sealed: two widths after its start
	young := randomKeys(400, "young")
	deliver(t, in, young, 20, nil)
	var oldRuns []string
	for _, r := range runTablesOf(t, db) {
		if strings.HasPrefix(r, bucket.Name("idem_inbox", oldBucket)+"_r") {
			oldRuns = append(oldRuns, r)
		}
	}
	if len(oldRuns) != 1 {
		t.Fatalf("sealed bucket %d has runs %v, want one", oldBucket, oldRuns)
	}
	// The horizon (three widths) refuses a younger age.
	if _, err := in.Sweep(context.Background(), w, 1000); !errors.Is(err, ErrHorizon) {
		t.Fatalf("sweep below the horizon: %v", err)
	}
	time.Sleep(3 * w)
	fresh := randomKeys(300, "new") // younger than the horizon at the sweep
	deliver(t, in, fresh, 20, nil)
	dropped, err := in.Sweep(context.Background(), 3*w, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if dropped == 0 {
		t.Fatal("nothing dropped")
	}
	for _, r := range runTablesOf(t, db) {
		if strings.HasPrefix(r, bucket.Name("idem_inbox", oldBucket)+"_") {
			t.Fatalf("run %s of a dropped bucket is left", r)
		}
	}
	// Keys younger than the horizon are all still found, in runs and hot
	// tables alike (the sealed young bucket is one run by now).
	if len(runTablesOf(t, db)) == 0 {
		t.Fatal("no runs left")
	}
	if got := deliver(t, in, fresh, 50, nil); got != 0 {
		t.Fatalf("%d keys younger than the horizon applied again", got)
	}
}

// runsWidth is a bucket width for a test of sealing and retention with
// small runs, derived from how fast this run delivers: a batch's attempt
// (its bucket check and flushes, then its transaction) must end within a
// width of its start, or it finds the clock past the newest bucket and is
// retried, and at one second a loaded machine (a flake run at load 14,
// the test 8 times slower than alone) failed every retry. The width is
// the slowest of 10 batches of 20 keys times 20, in whole seconds, at
// least 1 s.
func runsWidth(t *testing.T) time.Duration {
	t.Helper()
	_, in := runsFixture(t, filepath.Join(t.TempDir(), "calibrate.db"), WithBucketWidth(time.Second))
	var slowest time.Duration
	for i := range 10 {
		start := time.Now()
		deliver(t, in, randomKeys(20, fmt.Sprint("calibrate-", i)), 20, nil)
		slowest = max(slowest, time.Since(start))
	}
	w := max(time.Second, (20*slowest).Truncate(time.Second)+time.Second)
	t.Logf("bucket width %v (the slowest of 10 batches took %v)", w, slowest)
	return w
}

// TestRunsTableNameWithR: a table whose own name contains "_r" still finds
// its runs (a second Inbox reads them from the catalog).
func TestRunsTableNameWithR(t *testing.T) {
	smallRuns(t, 40, 3)
	path := filepath.Join(t.TempDir(), "r.db")
	db, a := runsFixture(t, path, WithTable("ev_runs_r2"), WithBucketWidth(time.Hour))
	keys := randomKeys(500, "k")
	if got := deliver(t, a, keys, 25, nil); got != len(keys) {
		t.Fatalf("applied %d", got)
	}
	if len(tablesLike(t, db, "ev_runs_r2_k*_r*")) == 0 {
		t.Fatal("no runs")
	}
	_, b := runsFixture(t, path, WithTable("ev_runs_r2"))
	if got := deliver(t, b, keys, 30, nil); got != 0 {
		t.Fatalf("a second Inbox applied %d recorded keys", got)
	}
}

// TestRunsWithoutFilters: with no filter memory every run is looked up for
// every key: slower, still exact.
func TestRunsWithoutFilters(t *testing.T) {
	smallRuns(t, 40, 3)
	db, in := runsFixture(t, filepath.Join(t.TempDir(), "r.db"), WithBucketWidth(time.Hour), WithLookupFilterMemory(0))
	keys := randomKeys(600, "k")
	if got := deliver(t, in, keys, 30, nil); got != len(keys) {
		t.Fatalf("applied %d", got)
	}
	if got := deliver(t, in, keys, 25, nil); got != 0 {
		t.Fatalf("applied %d twice", got)
	}
	if state(in).RunBytes.Load() != 0 {
		t.Fatal("filters held without a budget")
	}
	checkExactlyOnce(t, db)
}

// SetRunSizes sets the flush size and merge fanout of SQLite runs, for
// the scale tests (IDEM_SCALE_RUN_FLUSH, IDEM_SCALE_RUN_FANOUT).
func SetRunSizes(flush, fanout int) {
	if flush > 0 {
		runs.FlushKeys = flush
	}
	if fanout > 1 {
		runs.Fanout = fanout
	}
}
