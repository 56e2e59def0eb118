package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/testsupport/testport"
)

// RedisServer is a redis-server process a test owns: it can be killed,
// restarted on the same directory (and so the same dump.rdb and
// nodes.conf), and is stopped when the test ends (or by [Main]).
type RedisServer struct {
	Addr string
	Dir  string // the server's working directory: dump.rdb, nodes.conf, server.log

	bin  string
	args []string
	mu   sync.Mutex
	srv  *server // nil while killed
}

// StartRedis starts a redis-server of its own for t on a free port, in a
// temp dir, with persistence off unless args say otherwise (args are
// redis-server flags such as "--save", "60 1"). It skips (fails under CI)
// when redis-server is missing.
func StartRedis(t testing.TB, args ...string) *RedisServer {
	t.Helper()
	r, err := newRedisServer(args...)
	if err != nil {
		Missing(t, "Redis", redisInstall, err)
	}
	t.Cleanup(r.stop)
	return r
}

func newRedisServer(args ...string) (*RedisServer, error) {
	bin, err := findBinary("redis-server", "/usr/bin", "/usr/local/bin")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "idem-redis-")
	if err != nil {
		return nil, err
	}
	// A port the kernel called free may be taken by another test's server
	// before redis-server binds it; a cluster node also binds its bus port
	// (port+10000 unless given, never checked): both are picked here, and a
	// start that lost the race is retried on new ports.
	for attempt := 1; ; attempt++ {
		r, err := redisOnFreePorts(bin, dir, args)
		if err == nil {
			return r, nil
		}
		if attempt == 3 || !strings.Contains(err.Error(), "Address already in use") {
			os.RemoveAll(dir)
			return nil, err
		}
		_ = os.Remove(filepath.Join(dir, "nodes.conf")) // the lost start's node id
	}
}

func redisOnFreePorts(bin, dir string, args []string) (*RedisServer, error) {
	port, err := testport.Free()
	if err != nil {
		return nil, err
	}
	r := &RedisServer{Addr: fmt.Sprintf("127.0.0.1:%d", port), Dir: dir, bin: bin}
	r.args = []string{"--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--dir", dir, "--protected-mode", "no", "--enable-debug-command", "local"}
	if slices.Contains(args, "--cluster-enabled") {
		bus, err := testport.Free()
		if err != nil {
			return nil, err
		}
		r.args = append(r.args, "--cluster-port", fmt.Sprint(bus))
	}
	r.args = append(r.args, args...)
	if err := r.Start(); err != nil {
		r.Kill()
		return nil, err
	}
	return r, nil
}

// Start starts the server again after [RedisServer.Kill], on the same
// directory and port, and waits until it answers PING.
func (r *RedisServer) Start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.srv != nil {
		return fmt.Errorf("redis %s is running", r.Addr)
	}
	s, err := start(r.Dir, nil, r.bin, r.args...)
	if err != nil {
		return err
	}
	r.srv = s
	err = Poll(20*time.Second, 20*time.Millisecond, func() error {
		if out, err := nodeCmd(r.Addr, "ping"); err != nil || out != "PONG" {
			return fmt.Errorf("PING: %v %q", err, out)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redis %s did not answer: %v; log:\n%s", r.Addr, err, s.logTail())
	}
	return nil
}

// Kill kills the server with SIGKILL (no save, no goodbye to replicas or
// clients) and waits for it to exit. Its directory stays.
func (r *RedisServer) Kill() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.srv == nil {
		return
	}
	_ = syscall.Kill(-r.srv.cmd.Process.Pid, syscall.SIGKILL)
	_ = r.srv.cmd.Wait()
	r.srv.logf.Close()
	r.srv = nil
}

func (r *RedisServer) stop() {
	r.Kill()
	_ = os.RemoveAll(r.Dir)
}

// RedisCluster is a Redis Cluster of redis-server processes on loopback:
// Masters masters with one replica each.
type RedisCluster struct {
	Nodes []*RedisServer
}

// RedisClusterConfig shapes [StartRedisCluster]'s cluster.
type RedisClusterConfig struct {
	// NodeTimeout is cluster-node-timeout: how long a master may be
	// unreachable before its replica is promoted (default 1 s, so that
	// failover tests are short; production clusters use 5 s or more).
	NodeTimeout time.Duration
	// Args are extra redis-server flags for every node.
	Args []string
}

// StartRedisCluster starts a 6-node Redis Cluster of its own for t (3
// masters, 3 replicas, `redis-cli --cluster create … --cluster-replicas
// 1`), on free ports, and waits until every node reports cluster_state:ok.
// It is torn down when t ends. It skips (fails under CI) without
// redis-server and redis-cli.
func StartRedisCluster(t testing.TB, cfg RedisClusterConfig) *RedisCluster {
	t.Helper()
	c, err := newRedisCluster(cfg)
	if err != nil {
		Missing(t, "Redis Cluster (redis-server, redis-cli)", redisInstall+" redis-tools", err)
	}
	t.Cleanup(c.stop)
	return c
}

var rc struct {
	once sync.Once
	c    *RedisCluster
	err  error
}

// RedisClusterAddrs returns the addresses of a 6-node Redis Cluster
// started on first use and shared by the tests of this binary (give each
// test its own key prefix); it is stopped by [Main]. Tests that kill nodes
// start their own with [StartRedisCluster]. IDEM_TEST_REDIS_CLUSTER
// (comma-separated host:port) names an existing cluster instead.
func RedisClusterAddrs(t testing.TB) []string {
	t.Helper()
	if a := os.Getenv("IDEM_TEST_REDIS_CLUSTER"); a != "" {
		return strings.Split(a, ",")
	}
	rc.once.Do(func() {
		rc.c, rc.err = newRedisCluster(RedisClusterConfig{})
		if rc.err == nil {
			onStop(rc.c.stop)
		}
	})
	if rc.err != nil {
		Missing(t, "Redis Cluster (redis-server, redis-cli)", redisInstall+" redis-tools", rc.err)
	}
	return rc.c.Addrs()
}

func newRedisCluster(cfg RedisClusterConfig) (*RedisCluster, error) {
	if cfg.NodeTimeout == 0 {
		cfg.NodeTimeout = time.Second
	}
	cli, err := findBinary("redis-cli", "/usr/bin", "/usr/local/bin")
	if err != nil {
		return nil, err
	}
	c := &RedisCluster{}
	args := append([]string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", fmt.Sprint(cfg.NodeTimeout.Milliseconds()),
		// A replica cut off from its master for long may still be
		// promoted: the failover tests cut replication on purpose.
		"--cluster-replica-validity-factor", "0",
		"--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"}, cfg.Args...)
	for range 6 {
		n, err := newRedisServer(args...)
		if err != nil {
			c.stop()
			return nil, err
		}
		c.Nodes = append(c.Nodes, n)
	}
	create := append([]string{"--cluster", "create"}, c.Addrs()...)
	create = append(create, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.Command(cli, create...).CombinedOutput(); err != nil {
		c.stop()
		return nil, fmt.Errorf("redis-cli --cluster create: %v\n%s", err, out)
	}
	if err := c.WaitHealthy(30 * time.Second); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

// Addrs returns every node's host:port.
func (c *RedisCluster) Addrs() []string {
	var a []string
	for _, n := range c.Nodes {
		a = append(a, n.Addr)
	}
	return a
}

// WaitHealthy waits until every running node reports cluster_state:ok and
// every slot is served by a master that answers, with every master's
// replica online.
func (c *RedisCluster) WaitHealthy(d time.Duration) error {
	err := Poll(d, 50*time.Millisecond, func() error {
		for _, n := range c.Nodes {
			n.mu.Lock()
			up := n.srv != nil
			n.mu.Unlock()
			if !up {
				continue
			}
			info, err := nodeCmd(n.Addr, "cluster", "info")
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				return fmt.Errorf("%s: %v %.60q", n.Addr, err, info)
			}
		}
		_, err := c.Masters()
		return err
	})
	if err != nil {
		return fmt.Errorf("redis cluster not healthy: %w", err)
	}
	return nil
}

// WaitRole waits until node i reports role (master or slave) in INFO
// replication: a replica's promotion after its master was killed.
func (c *RedisCluster) WaitRole(i int, role string, d time.Duration) error {
	return Poll(d, 50*time.Millisecond, func() error {
		info, err := nodeCmd(c.Nodes[i].Addr, "info", "replication")
		if err == nil && !strings.Contains(strings.ReplaceAll(info, "\r", "")+"\n", "role:"+role+"\n") {
			err = fmt.Errorf("not %s", role)
		}
		if err != nil {
			return fmt.Errorf("node %s: %w", c.Nodes[i].Addr, err)
		}
		return nil
	})
}

// Masters returns the indexes in Nodes of the masters that serve slots,
// by CLUSTER NODES of a running node, or an error while a master that
// serves slots is marked failed.
func (c *RedisCluster) Masters() ([]int, error) {
	for _, n := range c.Nodes {
		out, err := nodeCmd(n.Addr, "cluster", "nodes")
		if err != nil {
			continue
		}
		var masters []int
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(line)
			if len(f) < 8 || !strings.Contains(f[2], "master") {
				continue
			}
			if len(f) == 8 { // no slots
				continue
			}
			if strings.Contains(f[2], "fail") {
				return nil, fmt.Errorf("master %s is %s", f[1], f[2])
			}
			addr := f[1]
			if i := strings.IndexByte(addr, '@'); i >= 0 {
				addr = addr[:i]
			}
			for i, m := range c.Nodes {
				if m.Addr == addr {
					masters = append(masters, i)
				}
			}
		}
		return masters, nil
	}
	return nil, fmt.Errorf("no node answers CLUSTER NODES")
}

// MasterOf returns the index of the node that serves key's slot and of
// its replica.
func (c *RedisCluster) MasterOf(key string) (master, replica int, err error) {
	for _, n := range c.Nodes {
		slot, err := nodeCmd(n.Addr, "cluster", "keyslot", key)
		if err != nil {
			continue
		}
		out, err := nodeCmd(n.Addr, "cluster", "nodes")
		if err != nil {
			continue
		}
		master, replica = -1, -1
		var masterID string
		lines := strings.Split(strings.TrimSpace(out), "\n")
		for _, line := range lines {
			f := strings.Fields(line)
			if len(f) > 8 && strings.Contains(f[2], "master") && servesSlot(f[8:], slot) {
				masterID, master = f[0], c.nodeIndex(f[1])
			}
		}
		for _, line := range lines {
			if f := strings.Fields(line); len(f) > 3 && f[3] == masterID && strings.Contains(f[2], "slave") {
				replica = c.nodeIndex(f[1])
			}
		}
		if master >= 0 && replica >= 0 {
			return master, replica, nil
		}
	}
	return -1, -1, fmt.Errorf("no node knows the master and replica of %q", key)
}

// nodeIndex returns the index in Nodes of the node at addr ("host:port" or
// CLUSTER NODES' "host:port@cport"), or -1.
func (c *RedisCluster) nodeIndex(addr string) int {
	if i := strings.IndexByte(addr, '@'); i >= 0 {
		addr = addr[:i]
	}
	for i, m := range c.Nodes {
		if m.Addr == addr {
			return i
		}
	}
	return -1
}

// servesSlot reports whether the slot ranges of a CLUSTER NODES line
// ("0-5460", "5461", "[...]" for migrating slots) contain slot.
func servesSlot(ranges []string, slot string) bool {
	n, err := strconv.Atoi(slot)
	if err != nil {
		return false
	}
	for _, r := range ranges {
		lo, hi, _ := strings.Cut(r, "-")
		if hi == "" {
			hi = lo
		}
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if err1 == nil && err2 == nil && a <= n && n <= b {
			return true
		}
	}
	return false
}

func (c *RedisCluster) stop() {
	for _, n := range c.Nodes {
		n.stop()
	}
}

// nodeCmd runs one command on addr with redis-cli, with a short timeout,
// and returns its reply as text. An error reply is an error.
func nodeCmd(addr string, args ...string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	cli, err := findBinary("redis-cli", "/usr/bin", "/usr/local/bin")
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, cli, append([]string{"-h", host, "-p", port}, args...)...).Output()
	reply := strings.TrimRight(string(out), "\r\n")
	if err == nil && (strings.HasPrefix(reply, "ERR") || strings.HasPrefix(reply, "Could not connect")) {
		err = errors.New(reply)
	}
	return reply, err
}

// CopyFile copies src to dst (a dump.rdb kept for a later restore).
func CopyFile(dst, src string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o644)
}

// RDB returns the path of the server's snapshot file.
func (r *RedisServer) RDB() string { return filepath.Join(r.Dir, "dump.rdb") }
