package testenv

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/testsupport/testport"
)

// PGHA is a PostgreSQL primary and one streaming standby on loopback, for
// failover tests: its own pair of servers per test (a failover is
// destructive), stopped when the test ends.
//
// The standby streams through a TCP proxy in this process, so that a test
// can hold replication back (the proxy stops forwarding the primary's WAL;
// what it holds, and what the kernel buffers behind it, never reaches the
// standby) and cut it (KillPrimary drops everything held). Holding the
// standby's postmaster or walreceiver with SIGSTOP would not do: the WAL
// waits in the standby's socket buffer and is read after SIGCONT, and
// pg_wal_replay_pause pauses only replay, not receiving.
type PGHA struct {
	t       testing.TB
	bin     string // the directory of initdb, postgres, pg_basebackup
	cred    *syscall.Credential
	sync    bool
	proxy   *walProxy
	mu      sync.Mutex
	nodes   [2]*pgNode // [0] the first primary, [1] the first standby
	primary int        // index of the node that is primary now
}

type pgNode struct {
	port int
	dir  string
	srv  *server
	dead bool
}

// PGHAMode says how the primary waits for its standby.
type PGHAMode int

const (
	// PGAsync is PostgreSQL's default: COMMIT returns once the primary
	// has flushed it; the standby may not have it yet.
	PGAsync PGHAMode = iota
	// PGSync names the standby in synchronous_standby_names, with
	// synchronous_commit=on: COMMIT returns once the standby flushed it.
	PGSync
)

// StartPGHA starts a primary, takes a base backup for the standby and
// starts it streaming, and waits until the standby is streaming (and, in
// PGSync, is the synchronous standby). It skips (or fails under CI) when
// PostgreSQL is not installed.
func StartPGHA(t testing.TB, mode PGHAMode) *PGHA {
	t.Helper()
	if u := os.Getenv("IDEM_TEST_POSTGRES"); u != "" {
		t.Skip("IDEM_TEST_POSTGRES is set: the failover tests start their own primary and standby and need PostgreSQL's binaries (apt-get install -y postgresql)")
	}
	// pg_basebackup is not on PATH in Debian; the directory of the
	// newest version that has it has the others too.
	base, cred := pgServer(t, pgInstall)
	h := &PGHA{t: t, bin: base, cred: cred, sync: mode == PGSync}
	t.Cleanup(h.stop)
	if err := h.start(); err != nil {
		t.Fatalf("testenv: primary and standby: %v", err)
	}
	return h
}

// pgServer returns what a test that runs its own PostgreSQL servers needs:
// the directory of the server binaries ([pgBinDir]) and the user to run them
// as ([unprivileged]). When either is missing, t skips with install (or
// fails under CI).
func pgServer(t testing.TB, install string) (bin string, cred *syscall.Credential) {
	t.Helper()
	bin, err := pgBinDir()
	if err != nil {
		Missing(t, "PostgreSQL", install, err)
	}
	cred, err = unprivileged("postgres", "nobody")
	if err != nil {
		Missing(t, "PostgreSQL", install, err)
	}
	return bin, cred
}

// pgBinDir is the directory of the newest PostgreSQL's server binaries
// (Debian puts pg_basebackup on PATH as a wrapper script, not beside
// initdb).
func pgBinDir() (string, error) {
	m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_basebackup")
	if len(m) == 0 {
		initdb, err := findBinary("initdb")
		if err != nil {
			return "", err
		}
		if p, err := filepath.EvalSymlinks(initdb); err == nil {
			initdb = p
		}
		return filepath.Dir(initdb), nil
	}
	return filepath.Dir(m[len(m)-1]), nil
}

func (h *PGHA) start() error {
	p, err := h.newNode()
	if err != nil {
		return err
	}
	h.nodes[0] = p
	if err := runToEnd(p.dir, h.cred, filepath.Join(h.bin, "initdb"), "-D", p.data(), "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8", "--locale=C"); err != nil {
		return err
	}
	names := ""
	if h.sync {
		names = "standby1"
	}
	if err := h.run(p, "-c", "synchronous_standby_names="+names); err != nil {
		return err
	}
	h.proxy, err = newWALProxy(p.port)
	if err != nil {
		return err
	}
	s, err := h.newNode()
	if err != nil {
		return err
	}
	h.nodes[1] = s
	if err := runToEnd(s.dir, h.cred, filepath.Join(h.bin, "pg_basebackup"), "-D", s.data(), "-h", "127.0.0.1", "-p", fmt.Sprint(p.port), "-U", "postgres", "-X", "stream", "--no-sync"); err != nil {
		return err
	}
	conf := fmt.Sprintf("primary_conninfo = 'host=127.0.0.1 port=%d user=postgres application_name=standby1'\n", h.proxy.port())
	if err := os.WriteFile(filepath.Join(s.data(), "postgresql.auto.conf"), []byte(conf), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(s.data(), "standby.signal"), nil, 0o600); err != nil {
		return err
	}
	if h.cred != nil {
		for _, f := range []string{"postgresql.auto.conf", "standby.signal"} {
			if err := os.Chown(filepath.Join(s.data(), f), int(h.cred.Uid), int(h.cred.Gid)); err != nil {
				return err
			}
		}
	}
	// After a promotion the standby is the primary; it keeps the setting,
	// but with no standby of its own it must not wait for one.
	if err := h.run(s, "-c", "synchronous_standby_names=", "-c", "wal_retrieve_retry_interval=200ms"); err != nil {
		return err
	}
	// Streaming, and in PGSync the synchronous standby.
	want := "async"
	if h.sync {
		want = "sync"
	}
	return Poll(30*time.Second, 50*time.Millisecond, func() error {
		var state string
		err := h.admin(0).QueryRow(`SELECT sync_state FROM pg_stat_replication WHERE application_name = 'standby1' AND state = 'streaming'`).Scan(&state)
		if err == nil && state != want {
			err = fmt.Errorf("standby is %s, want %s", state, want)
		}
		return err
	})
}

func (h *PGHA) newNode() (*pgNode, error) {
	dir, err := os.MkdirTemp("", "idem-pgha-")
	if err != nil {
		return nil, err
	}
	n := &pgNode{dir: dir}
	if err := os.Mkdir(n.data(), 0o700); err != nil {
		return nil, err
	}
	if h.cred != nil {
		for _, p := range []string{dir, n.data()} {
			if err := os.Chown(p, int(h.cred.Uid), int(h.cred.Gid)); err != nil {
				return nil, err
			}
		}
	}
	if n.port, err = testport.Free(); err != nil {
		return nil, err
	}
	return n, nil
}

func (n *pgNode) data() string { return filepath.Join(n.dir, "data") }

// run starts the server of node n and waits until it answers.
func (h *PGHA) run(n *pgNode, args ...string) error {
	base := []string{"-D", n.data(), "-p", fmt.Sprint(n.port), "-k", n.dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=on", "-c", "max_connections=200",
		"-c", "shared_buffers=64MB", "-c", "synchronous_commit=on", "-c", "wal_sender_timeout=5s",
		"-c", "wal_receiver_timeout=5s"}
	s, err := start(n.dir, h.cred, filepath.Join(h.bin, "postgres"), append(base, args...)...)
	if err != nil {
		return err
	}
	n.srv = s
	db, err := sql.Open("pgx", n.url())
	if err != nil {
		return err
	}
	defer db.Close()
	return waitDB(db, s, 30*time.Second)
}

func (n *pgNode) url() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", n.port)
}

// admin opens a pool on node i, closed when the test ends.
func (h *PGHA) admin(i int) *sql.DB {
	return Open(h.t, "pgx", h.nodes[i].url())
}

// URL is what a client configures to follow failovers: both servers, and
// target_session_attrs=read-write so that a connection goes to whichever is
// primary now.
func (h *PGHA) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2&target_session_attrs=read-write",
		h.nodes[0].port, h.nodes[1].port)
}

// PrimaryURL and StandbyURL reach one server each: the ones that were
// primary and standby at the start.
func (h *PGHA) PrimaryURL() string { return h.nodes[0].url() }

// StandbyURL: see PrimaryURL.
func (h *PGHA) StandbyURL() string { return h.nodes[1].url() }

// HoldReplication stops shipping WAL to the standby: commits after it are
// on the primary alone (PGAsync) or wait for the standby (PGSync).
func (h *PGHA) HoldReplication() { h.proxy.hold(true) }

// ResumeReplication ships what was held.
func (h *PGHA) ResumeReplication() { h.proxy.hold(false) }

// WaitReplicated waits until the standby has replayed everything the
// primary has written so far.
func (h *PGHA) WaitReplicated(ctx context.Context) error {
	var lsn string
	if err := h.admin(0).QueryRowContext(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		return err
	}
	return Poll(30*time.Second, 20*time.Millisecond, func() error {
		var ok bool
		err := h.admin(1).QueryRowContext(ctx, `SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn`, lsn).Scan(&ok)
		if err == nil && !ok {
			err = errors.New("standby behind")
		}
		return err
	})
}

// KillPrimary kills the primary's postmaster and every backend with
// SIGKILL (no shutdown checkpoint, no WAL sent on the way out) and cuts
// the replication connection, dropping what was held.
func (h *PGHA) KillPrimary() {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.nodes[0]
	_ = syscall.Kill(-p.srv.cmd.Process.Pid, syscall.SIGKILL)
	_ = p.srv.cmd.Wait()
	p.dead = true
	h.proxy.cut()
}

// Promote makes the standby the primary (pg_promote) and waits until it
// accepts writes. It returns how long promotion took.
func (h *PGHA) Promote() time.Duration {
	start := time.Now()
	db := h.admin(1)
	if _, err := db.Exec(`SELECT pg_promote(true, 60)`); err != nil {
		h.t.Fatalf("testenv: pg_promote: %v", err)
	}
	err := Poll(60*time.Second, 20*time.Millisecond, func() error {
		var rec bool
		if err := db.QueryRow(`SELECT pg_is_in_recovery()`).Scan(&rec); err != nil {
			return err
		}
		if rec {
			return errors.New("still in recovery")
		}
		return nil
	})
	if err != nil {
		h.t.Fatalf("testenv: promote: %v", err)
	}
	h.mu.Lock()
	h.primary = 1
	h.mu.Unlock()
	return time.Since(start)
}

// StopPrimary shuts the primary down cleanly (SIGINT: PostgreSQL's fast
// shutdown, what pg_ctl stop -m fast sends): backends are terminated, the
// shutdown checkpoint is written and the walsenders send everything to the
// standby before they exit. It then waits until the standby's connection
// closed (it has received all the primary sent), so that a Promote after it
// is a clean switchover: nothing committed is lost, in either mode.
func (h *PGHA) StopPrimary() error {
	h.mu.Lock()
	p := h.nodes[0]
	_ = p.srv.cmd.Process.Signal(syscall.SIGINT)
	_ = p.srv.cmd.Wait()
	p.dead = true
	h.mu.Unlock()
	db := h.admin(1)
	return Poll(30*time.Second, 20*time.Millisecond, func() error {
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM pg_stat_wal_receiver WHERE status = 'streaming'`).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return errors.New("the standby still streams from the stopped primary")
		}
		return nil
	})
}

// Rejoin makes the first primary, killed or stopped, a streaming standby of
// the promoted one: a fresh base backup (what an operator, or Patroni when
// pg_rewind cannot run, does), streaming directly, asynchronously. A
// primary whose clients wait for a standby (synchronous replication,
// WithWaitReplicas) takes writes again once it streams.
func (h *PGHA) Rejoin() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	n, primary := h.nodes[0], h.nodes[1]
	if !n.dead || h.primary != 1 {
		return errors.New("testenv: rejoin: the first primary is alive or the standby was not promoted")
	}
	n.srv.logf.Close()
	if err := os.RemoveAll(n.data()); err != nil {
		return err
	}
	conn := fmt.Sprintf("host=127.0.0.1 port=%d user=postgres application_name=standby0", primary.port)
	if err := runToEnd(n.dir, h.cred, filepath.Join(h.bin, "pg_basebackup"), "-D", n.data(), "-d", conn, "-X", "stream", "-R", "--no-sync"); err != nil {
		return err
	}
	if err := h.run(n, "-c", "synchronous_standby_names=", "-c", "wal_retrieve_retry_interval=200ms"); err != nil {
		return err
	}
	n.dead = false
	db := h.admin(1)
	return Poll(30*time.Second, 20*time.Millisecond, func() error {
		var state string
		return db.QueryRow(`SELECT state FROM pg_stat_replication WHERE application_name = 'standby0' AND state = 'streaming'`).Scan(&state)
	})
}

func (h *PGHA) stop() {
	if h.proxy != nil {
		h.proxy.close()
	}
	for _, n := range h.nodes {
		if n == nil {
			continue
		}
		if n.srv != nil && !n.dead {
			n.srv.stop(syscall.SIGQUIT) // immediate shutdown: the data goes anyway
		} else if n.srv != nil {
			n.srv.logf.Close()
		}
		_ = os.RemoveAll(n.dir)
	}
}

// walProxy forwards the standby's replication connection to the primary;
// hold stops the primary-to-standby direction, cut closes every connection
// and refuses new ones.
type walProxy struct {
	ln     net.Listener
	target int
	mu     sync.Mutex
	cond   *sync.Cond
	held   bool
	dead   bool
	conns  []net.Conn
}

func newWALProxy(target int) (*walProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &walProxy{ln: ln, target: target}
	p.cond = sync.NewCond(&p.mu)
	go p.accept()
	return p, nil
}

func (p *walProxy) port() int { return p.ln.Addr().(*net.TCPAddr).Port }

func (p *walProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", p.target))
		p.mu.Lock()
		if err != nil || p.dead {
			p.mu.Unlock()
			c.Close()
			if up != nil {
				up.Close()
			}
			continue
		}
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		go p.copy(c, up, true) // the primary's WAL to the standby: held
		go p.copy(up, c, false)
	}
}

// copy forwards src to dst; gated is the primary-to-standby direction,
// which waits while the proxy holds.
func (p *walProxy) copy(dst, src net.Conn, gated bool) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for gated && p.held && !p.dead {
				p.cond.Wait()
			}
			dead := p.dead
			p.mu.Unlock()
			if dead {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil { // io.EOF or closed: the other side closes too
			return
		}
	}
}

func (p *walProxy) hold(on bool) {
	p.mu.Lock()
	p.held = on
	p.cond.Broadcast()
	p.mu.Unlock()
}

func (p *walProxy) cut() {
	p.mu.Lock()
	p.dead = true
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.cond.Broadcast()
	p.mu.Unlock()
}

func (p *walProxy) close() {
	p.cut()
	p.ln.Close()
}
