// Package testenv finds or starts the servers idem's tests need: a
// throwaway PostgreSQL (initdb + postgres in a temp dir, free port), MariaDB,
// Redis, a Redis Cluster, RabbitMQ, dynalite (DynamoDB's API), and
// temp-file SQLite databases. One server of each kind is started per test
// binary, on first use, and stopped by [Main]; every test gets its own
// schema, database or key prefix on it. The clusters a failover test
// breaks are started per test: a PostgreSQL primary and standby
// ([StartPGHA]), Patroni over etcd ([StartPatroni]) and a MariaDB Galera
// cluster ([StartGalera]). It also holds the helpers for tests that run
// processes: [StartProc], [WaitFor], [Poll], [SyncBuffer], [RefusingAddr].
//
// An existing server is used instead when its address is in the
// environment: IDEM_TEST_POSTGRES (a postgres:// URL of a superuser),
// IDEM_TEST_MYSQL (a go-sql-driver DSN of a user that may CREATE DATABASE),
// IDEM_TEST_REDIS (host:port), IDEM_TEST_RABBITMQ (an amqp:// URL),
// IDEM_TEST_DYNAMODB (the http:// endpoint of a DynamoDB-API server; by
// default dynalite, installed from npm by scripts/install-deps.sh),
// IDEM_TEST_REDIS_CLUSTER (comma-separated host:port of a Redis Cluster; by
// default six redis-server processes, three masters and three replicas).
//
// When a server is missing, a test skips with the command that installs it;
// with CI=true it fails instead, so that CI never passes by skipping.
package testenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idem-go/idem/sqldialect"
	_ "modernc.org/sqlite" // SQLite driver for tests
)

// Main runs the tests and then stops every server this binary started. Use
// it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }
func Main(m *testing.M) int {
	code := m.Run()
	stopAll()
	return code
}

// Child runs child instead of the tests when the environment variable env
// is "1" (the test binary re-executed as a worker or a server process), and
// exits with its code. Call it first in TestMain.
func Child(env string, child func() int) {
	if os.Getenv(env) == "1" {
		os.Exit(child())
	}
}

// InCI reports whether the tests run under CI (CI=true), where a missing
// server is a failure, not a skip.
func InCI() bool {
	v := strings.ToLower(os.Getenv("CI"))
	return v == "true" || v == "1" || v == "yes"
}

// Missing skips t with the command that installs what is missing, or fails
// it under CI.
func Missing(t testing.TB, what, install string, err error) {
	t.Helper()
	Cannot(t, fmt.Sprintf("%s is not available (%v); install it with: %s (or run `make test`, which does)", what, err, install))
}

// Cannot skips t with msg, which says why the test cannot run here and what
// to do about it, or fails it under CI, where every test must run.
func Cannot(t testing.TB, msg string) {
	t.Helper()
	if InCI() {
		t.Fatalf("CI=true: %s", msg)
	}
	t.Skip(msg)
}

var (
	stopMu sync.Mutex
	stops  []func()
)

func onStop(f func()) {
	stopMu.Lock()
	stops = append(stops, f)
	stopMu.Unlock()
}

func stopAll() {
	stopMu.Lock()
	defer stopMu.Unlock()
	for i := len(stops) - 1; i >= 0; i-- {
		stops[i]()
	}
	stops = nil
}

// findBinary looks for name on PATH and then in dirs (globs allowed).
func findBinary(name string, dirs ...string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range dirs {
		matches, _ := filepath.Glob(filepath.Join(d, name))
		for i := len(matches) - 1; i >= 0; i-- { // newest version last in lexical order
			if st, err := os.Stat(matches[i]); err == nil && st.Mode()&0o111 != 0 {
				return matches[i], nil
			}
		}
	}
	return "", fmt.Errorf("%s not found on PATH or in %v", name, dirs)
}

// shared is a server started once per test binary, on first use, and
// shared by its tests; v is how to reach it.
type shared[T any] struct {
	once sync.Once
	v    T
	err  error
}

// get starts the server with start on first use. If it cannot be had, t
// skips with the command that installs what (or fails under CI).
func (s *shared[T]) get(t testing.TB, what, install string, start func() (T, error)) T {
	t.Helper()
	s.once.Do(func() { s.v, s.err = start() })
	if s.err != nil {
		Missing(t, what, install, s.err)
	}
	return s.v
}

// envServer is a [shared] server that tests reach by a string (a URL or
// an address): the value of the environment variable env when it is set,
// else what start returns once it has started one. If neither can be had,
// a test skips with the command that installs what (or fails under CI).
type envServer struct {
	what, install string
	env           string
	start         func() (string, error)
	s             shared[string]
}

// get returns the server's URL or address, starting it on first use.
func (e *envServer) get(t testing.TB) string {
	t.Helper()
	return e.s.get(t, e.what, e.install, func() (string, error) {
		if v := os.Getenv(e.env); v != "" {
			return v, nil
		}
		return e.start()
	})
}

// Open opens dsn with driver; the pool is closed when t ends.
func Open(t testing.TB, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// scratch runs create (a format for a fresh name, such as "CREATE SCHEMA
// %s") on the server at admin, runs drop with that name when t ends, and
// returns the name.
func scratch(t testing.TB, driver, admin, create, drop string) string {
	t.Helper()
	name := Name("t_")
	db, err := sql.Open(driver, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(fmt.Sprintf(create, name)); err != nil {
		t.Fatalf("testenv: %s: %v", fmt.Sprintf(create, name), err)
	}
	t.Cleanup(func() {
		db, err := sql.Open(driver, admin)
		if err != nil {
			return
		}
		defer db.Close()
		_, _ = db.Exec(fmt.Sprintf(drop, name))
	})
	return name
}

// server is a child process started by testenv.
type server struct {
	cmd    *exec.Cmd
	dir    string
	logf   *os.File
	exited chan struct{} // closed once the process has exited; only from startEnv
}

// start runs bin with args as a child that dies with this process, logging to
// dir/server.log, optionally as another user (servers that refuse root).
func start(dir string, cred *syscall.Credential, bin string, args ...string) (*server, error) {
	cmd, logf, err := command(dir, cred, bin, args...)
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	return &server{cmd: cmd, dir: dir, logf: logf}, nil
}

// startEnv is start with an environment (RabbitMQ is configured through
// environment variables), the working directory dir, and the exited channel.
func startEnv(dir string, env []string, bin string, args ...string) (*server, error) {
	cmd, logf, err := command(dir, nil, bin, args...)
	if err != nil {
		return nil, err
	}
	cmd.Env, cmd.Dir = env, dir
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	return &server{cmd: cmd, dir: dir, logf: logf, exited: exited}, nil
}

// runToEnd runs bin with args (a setup step such as initdb) until it
// exits, logging to dir/server.log; a failure returns the log's end.
func runToEnd(dir string, cred *syscall.Credential, bin string, args ...string) error {
	cmd, logf, err := command(dir, cred, bin, args...)
	if err != nil {
		return err
	}
	defer logf.Close()
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %v: %s", filepath.Base(bin), err, (&server{dir: dir}).logTail())
	}
	return nil
}

func command(dir string, cred *syscall.Credential, bin string, args ...string) (*exec.Cmd, *os.File, error) {
	logf, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return nil, nil, err
	}
	bin, args = Pinned(bin, args...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	dieWithParent(cmd.SysProcAttr)
	return cmd, logf, nil
}

// ServerCPUsEnv names the variable that pins the servers the tests start:
// set to a CPU list in taskset's syntax ("1", "2-3"), every server process
// that testenv starts (and natsenv's, which reads the same variable) runs
// on those CPUs only, so that a benchmark run under "taskset -c 0" has the
// broker's or the database's work on other cores than its own. Unset (the
// suite, CI), servers run wherever the kernel puts them.
const ServerCPUsEnv = "IDEM_TEST_SERVER_CPUS"

// Pinned returns the command line that runs bin with args on the CPUs
// that [ServerCPUsEnv] lists, through taskset (util-linux), or bin and
// args unchanged when it is unset.
func Pinned(bin string, args ...string) (string, []string) {
	cpus := os.Getenv(ServerCPUsEnv)
	if cpus == "" {
		return bin, args
	}
	return "taskset", append([]string{"-c", cpus, bin}, args...)
}

// stop signals the server, kills its process group if it has not exited
// 15 s later, and removes its directory.
func (s *server) stop(sig syscall.Signal) {
	_ = s.cmd.Process.Signal(sig)
	done := s.exited
	if done == nil {
		done = make(chan struct{})
		go func() { _ = s.cmd.Wait(); close(done) }()
	}
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	s.logf.Close()
	_ = os.RemoveAll(s.dir)
}

func (s *server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// unprivileged returns the credential of a non-root user for servers that
// refuse to run as root, or nil when the tests do not run as root.
func unprivileged(names ...string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, n := range names {
		u, err := user.Lookup(n)
		if err != nil {
			continue
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, fmt.Errorf("running as root and none of the users %v exists", names)
}

// Poll calls try every interval until it returns nil or d has passed; then
// it returns try's last error, wrapped with d. Every wait for a server to
// come up or to settle is one Poll, and so is a test's retry of a
// statement whose pooled connections to a killed primary fail once each.
func Poll(d, every time.Duration, try func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := try()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v: %w", d, err)
		}
		time.Sleep(every)
	}
}

// waitDB pings db until it answers or d passes.
func waitDB(db *sql.DB, s *server, d time.Duration) error {
	err := Poll(d, 50*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return db.PingContext(ctx)
	})
	if err != nil && s != nil {
		return fmt.Errorf("server did not answer: %v; log:\n%s", err, s.logTail())
	}
	return err
}

// Name returns a short unique identifier for one test's schema or database.
func Name(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// SQLite returns a *sql.DB on a fresh SQLite file in t's temp dir, opened
// with the settings idem expects (see sqldialect.SQLiteDSN).
func SQLite(t testing.TB) *sql.DB {
	t.Helper()
	return Open(t, "sqlite", SQLiteDSN(t))
}

// SQLiteDSN returns the DSN of a fresh SQLite file in t's temp dir.
func SQLiteDSN(t testing.TB) string {
	return sqldialect.SQLiteDSN(filepath.Join(t.TempDir(), "test.db"))
}
