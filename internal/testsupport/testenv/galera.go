package testenv

import (
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idem-go/idem/internal/testsupport/testport"
)

const galeraInstall = "apt-get install -y mariadb-server galera-4 rsync"

// Galera is a 3-node MariaDB Galera cluster on loopback, for tests of
// multi-primary writes and of a node's death: its own cluster per test
// (a kill is destructive), stopped when the test ends.
//
// Node 0 bootstraps the cluster (--wsrep-new-cluster); nodes 1 and 2 join
// it and receive its state by rsync (wsrep_sst_method=rsync). Every node
// accepts writes; a write set is certified on every node before COMMIT
// returns, and the losing one of two conflicting transactions on two nodes
// fails at COMMIT with 1213 (ER_LOCK_DEADLOCK), rolled back everywhere.
// Row locks, and InnoDB's gap locks, are local to a node.
type Galera struct {
	t     testing.TB
	cred  *syscall.Credential // root runs the servers as mysql
	user  string
	mu    sync.Mutex
	nodes []*galeraNode
	db    string // the test's database, on every node
}

type galeraNode struct {
	dir        string
	port, repl int // client port, group communication port
	ist, sst   int
	srv        *server
	dead       bool
}

// GaleraNodes is the size of the cluster StartGalera starts.
const GaleraNodes = 3

// StartGalera starts a 3-node cluster, creates a database for the test on
// it, and waits until every node is synced. It skips (or fails under CI)
// when MariaDB, galera-4 or rsync is missing.
func StartGalera(t testing.TB) *Galera {
	t.Helper()
	server, provider, err := galeraBinaries()
	if err != nil {
		Missing(t, "MariaDB Galera", galeraInstall, err)
	}
	_ = mysql.SetLogger(quiet{})
	// As root, the joiner's rsync daemon would drop to nobody and could
	// not write the data directory: the servers run as mysql.
	cred, err := unprivileged("mysql")
	if err != nil {
		Missing(t, "MariaDB Galera", galeraInstall, err)
	}
	g := &Galera{t: t, cred: cred, user: currentUser()}
	if cred != nil {
		g.user = "mysql"
	}
	t.Cleanup(g.stop)
	if err := g.start(server, provider); err != nil {
		t.Fatalf("testenv: Galera cluster: %v", err)
	}
	return g
}

func galeraBinaries() (server, provider string, err error) {
	dirs := []string{"/usr/sbin", "/usr/bin"}
	if server, err = findBinary("mariadbd", dirs...); err != nil {
		return "", "", err
	}
	for _, p := range []string{"/usr/lib/galera/libgalera_smm.so", "/usr/lib/libgalera_smm.so", "/usr/lib/galera-4/libgalera_smm.so"} {
		if _, err := os.Stat(p); err == nil {
			provider = p
			break
		}
	}
	if provider == "" {
		return "", "", errors.New("libgalera_smm.so (package galera-4) not found")
	}
	for _, b := range []string{"rsync", "wsrep_sst_rsync", "mariadb-install-db"} {
		if _, err := findBinary(b, dirs...); err != nil {
			return "", "", err
		}
	}
	return server, provider, nil
}

func (g *Galera) start(server, provider string) error {
	install, err := findBinary("mariadb-install-db", "/usr/bin", "/usr/sbin")
	if err != nil {
		return err
	}
	for range GaleraNodes {
		n := &galeraNode{}
		if n.dir, err = os.MkdirTemp("", "idem-galera-"); err != nil {
			return err
		}
		for _, p := range []*int{&n.port, &n.repl, &n.ist, &n.sst} {
			if *p, err = testport.Free(); err != nil {
				return err
			}
		}
		for _, d := range []string{"tmp", "data"} {
			if err := os.Mkdir(filepath.Join(n.dir, d), 0o700); err != nil {
				return err
			}
		}
		if g.cred != nil {
			for _, d := range []string{"", "tmp", "data"} {
				if err := os.Chown(filepath.Join(n.dir, d), int(g.cred.Uid), int(g.cred.Gid)); err != nil {
					return err
				}
			}
		}
		g.nodes = append(g.nodes, n)
	}
	var peers []string
	for _, n := range g.nodes {
		peers = append(peers, fmt.Sprintf("127.0.0.1:%d", n.repl))
	}
	cluster := "gcomm://" + strings.Join(peers, ",")
	first := g.nodes[0]
	if err := runToEnd(first.dir, g.cred, install, "--no-defaults", "--datadir="+first.data(), "--user="+g.user,
		"--auth-root-authentication-method=normal", "--skip-test-db"); err != nil {
		return err
	}
	for i, n := range g.nodes {
		// A joiner's data directory stays empty: the state transfer fills it.
		args := []string{"--no-defaults", "--datadir=" + n.data(), "--user=" + g.user, "--tmpdir=" + filepath.Join(n.dir, "tmp"),
			"--port=" + fmt.Sprint(n.port), "--bind-address=127.0.0.1", "--socket=" + filepath.Join(n.dir, "mysqld.sock"),
			"--pid-file=" + filepath.Join(n.dir, "mysqld.pid"), "--innodb-buffer-pool-size=64M", "--max-connections=200",
			"--skip-name-resolve", "--innodb-flush-log-at-trx-commit=1",
			"--binlog-format=ROW", "--default-storage-engine=InnoDB", "--innodb-autoinc-lock-mode=2",
			"--wsrep-on=ON", "--wsrep-provider=" + provider, "--wsrep-cluster-name=idem",
			"--wsrep-cluster-address=" + cluster, "--wsrep-node-name=node" + fmt.Sprint(i),
			"--wsrep-node-address=127.0.0.1", "--wsrep-sst-method=rsync",
			"--wsrep-sst-receive-address=127.0.0.1:" + fmt.Sprint(n.sst),
			fmt.Sprintf("--wsrep-provider-options=gmcast.listen_addr=tcp://127.0.0.1:%d;ist.recv_addr=127.0.0.1:%d;gcache.size=64M", n.repl, n.ist),
			"--wsrep-slave-threads=2"}
		if i == 0 {
			args = append(args, "--wsrep-new-cluster")
		}
		if n.srv, err = start(n.dir, g.cred, server, args...); err != nil {
			return err
		}
		// Joiners one at a time: each takes its state from a synced node.
		if err := g.waitSynced(i, 60*time.Second); err != nil {
			return fmt.Errorf("node %d: %w: %s", i, err, n.srv.logTail())
		}
	}
	g.db = Name("t_")
	admin := g.open(0, "")
	defer admin.Close()
	if _, err := admin.Exec("CREATE DATABASE " + g.db); err != nil {
		return err
	}
	// The database reaches every node before its tests connect.
	for i := range g.nodes {
		err := Poll(30*time.Second, 50*time.Millisecond, func() error {
			db := g.open(i, g.db)
			defer db.Close()
			return db.Ping()
		})
		if err != nil {
			return fmt.Errorf("node %d: %w", i, err)
		}
	}
	return nil
}

func (n *galeraNode) data() string { return filepath.Join(n.dir, "data") }

func (g *Galera) config(i int, db string) *mysql.Config {
	c := mysql.NewConfig()
	c.User = "root"
	c.Net = "tcp"
	c.Addr = fmt.Sprintf("127.0.0.1:%d", g.nodes[i].port)
	c.DBName = db
	c.Timeout = 2 * time.Second
	return c
}

func (g *Galera) open(i int, db string) *sql.DB {
	d, _ := sql.Open("mysql", g.config(i, db).FormatDSN())
	return d
}

// waitSynced waits until node i answers and its wsrep_local_state_comment
// is Synced. A joiner's state transfer (a shell script and rsync) takes
// seconds on a quiet machine and minutes on a loaded one, logging as it
// goes, so the wait has no fixed length: it ends with an error once the
// node's log has not grown for quiet (the node is stuck or gone), or after
// joinCap in all.
func (g *Galera) waitSynced(i int, quiet time.Duration) error {
	db := g.open(i, "")
	defer db.Close()
	logf := g.nodes[i].srv.logf
	began := time.Now()
	grew, size := began, int64(-1)
	for {
		var name, state string
		err := db.QueryRow(`SHOW STATUS LIKE 'wsrep_local_state_comment'`).Scan(&name, &state)
		if err == nil && state != "Synced" {
			err = fmt.Errorf("state %s", state)
		}
		if err == nil {
			return nil
		}
		now := time.Now()
		if fi, serr := logf.Stat(); serr == nil && fi.Size() != size {
			grew, size = now, fi.Size()
		}
		if now.Sub(grew) > quiet || now.Sub(began) > joinCap {
			return fmt.Errorf("after %v, the node's log quiet for %v: %w", now.Sub(began).Round(time.Second), now.Sub(grew).Round(time.Second), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// joinCap bounds a Galera node's start and state transfer, however long it
// keeps logging.
const joinCap = 10 * time.Minute

// DSN is node i's DSN for the test's database (go-sql-driver/mysql).
func (g *Galera) DSN(i int) string { return g.config(i, g.db).FormatDSN() }

// DB opens a pool on node i's copy of the test's database, closed when the
// test ends.
func (g *Galera) DB(i int) *sql.DB { return Open(g.t, "mysql", g.DSN(i)) }

// SyncedDB is DB with wsrep_sync_wait=1 on each connection: a read waits
// until node i has applied every write set the cluster had committed when
// the read began. Galera certifies a write on every node before COMMIT
// returns but applies it on the others afterwards, so a plain read through
// another node can miss a write that already returned.
func (g *Galera) SyncedDB(i int) *sql.DB {
	c := g.config(i, g.db)
	c.Params = map[string]string{"wsrep_sync_wait": "1"}
	return Open(g.t, "mysql", c.FormatDSN())
}

// Kill kills node i's server with SIGKILL. The others notice it is gone
// after the group communication's suspect timeout (evs.suspect_timeout,
// 5 s by default) and go on as a cluster of the rest.
func (g *Galera) Kill(i int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := g.nodes[i]
	_ = syscall.Kill(-n.srv.cmd.Process.Pid, syscall.SIGKILL)
	_ = n.srv.cmd.Wait()
	n.dead = true
}

func (g *Galera) stop() {
	for _, n := range g.nodes {
		if n.srv != nil && !n.dead {
			_ = syscall.Kill(-n.srv.cmd.Process.Pid, syscall.SIGKILL) // the data goes anyway
			_ = n.srv.cmd.Wait()
		}
		if n.srv != nil {
			n.srv.logf.Close()
		}
		_ = os.RemoveAll(n.dir)
	}
}
