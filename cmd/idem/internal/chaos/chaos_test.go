package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/redisstore"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// The tests run the harness in the test process and its workers as this
// test binary re-executed with workerEnv set: TestMain then serves the
// worker protocol instead of running tests.
const workerEnv = "IDEM_CHAOS_WORKER"

func TestMain(m *testing.M) {
	testenv.Child(workerEnv, runWorker)
	os.Exit(testenv.Main(m))
}

// runWorker serves the worker protocol on stdin and stdout.
func runWorker() int {
	var opts []workerOption
	if os.Getenv("IDEM_CHAOS_NO_OPENER") == "" {
		opts = append(opts, WithKeystoreOpener(openRedis))
	}
	if err := ServeWorker(context.Background(), os.Stdin, os.Stdout, opts...); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	return 0
}

// workerCommand starts a worker: this test binary, running no tests.
func workerCommand(ctx context.Context) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	// GORACE: a race-enabled binary otherwise sleeps 1 s before exiting.
	cmd.Env = append(os.Environ(), workerEnv+"=1", "GORACE=atexit_sleep_ms=0")
	return cmd
}

func openRedis(_ context.Context, url string) (keystore.Store, func() error, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, nil, err
	}
	rdb := redis.NewClient(opt)
	s, err := redisstore.New(rdb)
	if err != nil {
		rdb.Close()
		return nil, nil, err
	}
	return s, rdb.Close, nil
}

// quick are the options of the short runs: fault rates high enough that
// every naive strategy fails even in a few hundred messages, and timeouts
// short enough that lost acks and held leases do not dominate the run.
// Crashes between two commits are what make key-before-effect lose and
// keystore-bare double whatever the timing; they are fixed by the seed.
// Seed 10, used below, orders the first attempts of messages 5 and 108 to
// die "between", and more past message 160.
func quick(opts ...Option) []Option {
	return append([]Option{
		withWorkerCommand(workerCommand),
		WithDupRate(0.3), WithCrashRate(0.03), WithAckLossRate(0.03),
		WithVisibilityTimeout(250 * time.Millisecond),
		WithLease(250 * time.Millisecond),
	}, opts...)
}

// size returns n, or small under the race detector, whose workers (this
// race-instrumented binary) are several times slower.
func size(n, small int) int {
	if raceEnabled {
		return small
	}
	return n
}

// checkReport asserts that every idem strategy was exactly once and that
// every naive one was caught losing or doubling messages.
func checkReport(t *testing.T, rep *Report) {
	t.Helper()
	var table strings.Builder
	_ = rep.WriteTable(&table)
	t.Logf("\n%s", table.String())
	for _, s := range rep.Strategies {
		switch {
		case s.Idem && !s.exactlyOnce():
			t.Errorf("%s: lost %d, doubled %d, unfinished %d, accounts wrong %d, error %q",
				s.Name, s.Lost, s.Doubled, s.Unfinished, s.AccountsWrong, s.Error)
		case !s.Idem && s.Lost == 0 && s.Doubled == 0:
			t.Errorf("%s: the harness saw no failure: it lost and doubled nothing", s.Name)
		}
		if s.Delivered < int64(s.Messages) {
			t.Errorf("%s: %d deliveries for %d messages", s.Name, s.Delivered, s.Messages)
		}
	}
	if rep.Strategies[0].Crashes == 0 || rep.Strategies[0].AcksLost == 0 || rep.Strategies[0].Duplicates == 0 {
		t.Errorf("faults were not injected: %+v", rep.Strategies[0])
	}
}

// noChildren fails if this process still has child processes (a worker
// not reaped, or a zombie).
func noChildren(t *testing.T) {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		if testenv.InCI() {
			t.Fatalf("CI=true: no /proc to check for leftover workers: %v", err)
		}
		t.Skipf("no /proc (not Linux; under CI=true this fails instead), so leftover workers cannot be checked: %v", err)
	}
	me := strconv.Itoa(os.Getpid())
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may contain spaces.
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) > 1 && fields[1] == me {
			cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
			if strings.Contains(string(cmdline), "postgres") || strings.Contains(string(cmdline), "redis") {
				continue // testenv's servers
			}
			t.Errorf("child process %s left behind (state %s): %q", e.Name(), fields[0], cmdline)
		}
	}
}

func TestSQLiteAllStrategies(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := Run(ctx, quick(WithMessages(size(2000, 240)), WithSeed(10), WithConsumers(3))...)
	if err != nil {
		t.Fatal(err)
	}
	checkReport(t, rep)
	if len(rep.Strategies) != len(Strategies()) {
		t.Errorf("ran %d strategies, want all %d", len(rep.Strategies), len(Strategies()))
	}
	noChildren(t)
}

func TestPostgresFourConsumers(t *testing.T) {
	url := testenv.PostgresURL(t) // fails under CI=true when PostgreSQL is missing
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := Run(ctx, quick(WithBackend(backendPostgres, url), WithMessages(size(800, 160)),
		WithSeed(10), WithConsumers(4))...)
	if err != nil {
		t.Fatal(err)
	}
	checkReport(t, rep)
	noChildren(t)
}

func TestRedisKeystore(t *testing.T) {
	addr := testenv.RedisAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, quick(WithKeystore("redis://"+addr), WithMessages(size(500, 160)), WithSeed(10),
		WithConsumers(2), WithStrategies("keystore-bare", "idem-keystore"))...)
	if err != nil {
		t.Fatal(err)
	}
	checkReport(t, rep)
	if rep.Keystore == "" {
		t.Error("report does not name the key store")
	}
}

func TestOptionsAreValidated(t *testing.T) {
	for name, o := range map[string]Option{
		"messages":   WithMessages(0),
		"dup rate":   WithDupRate(1.5),
		"crash rate": WithCrashRate(-0.1),
		"ack loss":   WithAckLossRate(0.9),
		"reorder":    WithReorder(2),
		"backend":    WithBackend("mysql", ""),
		"pg dsn":     WithBackend(backendPostgres, "host=x"),
		"keystore":   WithKeystore("memory"),
		"strategy":   WithStrategies("idem-magic"),
		"twice":      WithStrategies("naive", "naive"),
		"none":       WithStrategies(),
		"consumers":  WithConsumers(0),
		"partitions": WithPartitions(0),
		"visibility": WithVisibilityTimeout(time.Millisecond),
		"lease":      WithLease(0),
		"command":    withWorkerCommand(nil),
		"progress":   WithProgress(nil),
		"logger":     WithLogger(nil),
		"nil":        nil,
	} {
		_, err := Run(context.Background(), o)
		if !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("%s: err = %v, want ErrInvalidOption", name, err)
		}
	}
}

func TestWorkersThatCannotStartFailTheRun(t *testing.T) {
	rep, err := Run(context.Background(), WithMessages(10), WithStrategies("idem-keystore"),
		WithKeystore("redis://127.0.0.1:1"), withWorkerCommand(func(ctx context.Context) *exec.Cmd {
			cmd := workerCommand(ctx)
			cmd.Env = append(cmd.Env, "IDEM_CHAOS_NO_OPENER=1")
			return cmd
		}))
	if err == nil || !strings.Contains(err.Error(), "fail to start") {
		t.Fatalf("err = %v, want workers failing to start", err)
	}
	if rep == nil || len(rep.Strategies) != 1 || rep.Strategies[0].Error == "" {
		t.Fatalf("report = %+v", rep)
	}
	noChildren(t)
}

func TestProgressAndCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var calls int
	rep, err := Run(ctx, quick(WithMessages(200000), WithStrategies("naive"), WithConsumers(2),
		WithProgress(func(p Progress) {
			if calls++; calls == 3 {
				cancel()
			}
		}))...)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if rep == nil || len(rep.Strategies) != 1 || rep.Strategies[0].Unfinished == 0 || rep.Strategies[0].exactlyOnce() {
		t.Fatalf("report of a cancelled run = %+v", rep)
	}
	noChildren(t)
}

// TestLongRun is the long run behind `make chaos`: IDEM_CHAOS_LONG=<messages>
// runs every strategy with the default fault rates on SQLite and on
// PostgreSQL with 4 consumer processes; IDEM_CHAOS_SEED picks the seed
// (default 1).
func TestLongRun(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("IDEM_CHAOS_LONG"))
	if n <= 0 {
		t.Skip("the long run is opt-in: set IDEM_CHAOS_LONG=<messages> (make chaos does); the short run always runs")
	}
	seed, err := strconv.ParseUint(os.Getenv("IDEM_CHAOS_SEED"), 10, 64)
	if err != nil {
		seed = 1
	}
	for _, backend := range []string{BackendSQLite, backendPostgres} {
		t.Run(backend, func(t *testing.T) {
			opts := []Option{withWorkerCommand(workerCommand), WithMessages(n), WithSeed(seed), WithConsumers(4)}
			if backend == backendPostgres {
				opts = append(opts, WithBackend(backendPostgres, testenv.PostgresURL(t)))
			}
			rep, err := Run(context.Background(), opts...)
			if err != nil {
				t.Fatal(err)
			}
			checkReport(t, rep)
			noChildren(t)
		})
	}
}
