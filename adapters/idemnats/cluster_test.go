//go:build linux

package idemnats_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A 3-server JetStream cluster on loopback for the failover tests. Each
// server is this test binary run again as a child process (clusterChildEnv
// set): an embedded nats-server with routes to the other two, so that a
// test can kill one with SIGKILL (a crash, not a shutdown) and start it
// again on the same ports and store directory. The child is caught in init,
// before TestMain, and never runs a test.

const clusterChildEnv = "IDEM_NATS_CLUSTER_CHILD"

func init() {
	if cfg := os.Getenv(clusterChildEnv); cfg != "" {
		os.Exit(runClusterChild(cfg))
	}
}

// clusterChild is one server's configuration, passed to its process as JSON.
type clusterChild struct {
	Name        string `json:"name"`
	Port        int    `json:"port"`
	ClusterPort int    `json:"cluster_port"`
	Dir         string `json:"dir"`
	Routes      string `json:"routes"`
}

// runClusterChild runs one clustered JetStream server until it is killed.
func runClusterChild(raw string) int {
	var c clusterChild
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	s, err := server.NewServer(&server.Options{
		ServerName: c.Name, Host: "127.0.0.1", Port: c.Port, JetStream: true, StoreDir: c.Dir,
		Cluster: server.ClusterOpts{Name: "idem", Host: "127.0.0.1", Port: c.ClusterPort},
		Routes:  server.RoutesFromStr(c.Routes), NoSigs: true, NoLog: true,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	s.Start()
	s.WaitForShutdown()
	return 0
}

// jsCluster is three child servers, killed when the test that started them
// ends.
type jsCluster struct {
	nodes []*jsNode
}

type jsNode struct {
	cfg clusterChild
	mu  sync.Mutex
	cmd *exec.Cmd
}

// startJSCluster starts three servers storing in t's temp dirs and waits
// until JetStream answers through the cluster.
func startJSCluster(t testing.TB) *jsCluster {
	t.Helper()
	c := &jsCluster{}
	var routes []string
	for i := range 3 {
		n := &jsNode{cfg: clusterChild{Name: fmt.Sprint("n", i+1), Port: freeLoopbackPort(t), ClusterPort: freeLoopbackPort(t), Dir: t.TempDir()}}
		c.nodes = append(c.nodes, n)
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", n.cfg.ClusterPort))
	}
	// Registered after the temp dirs: cleanups run last-in first-out, so
	// the servers are dead before their directories are removed.
	t.Cleanup(func() {
		for _, n := range c.nodes {
			n.kill()
		}
	})
	for _, n := range c.nodes {
		n.cfg.Routes = strings.Join(routes, ",")
		if err := n.start(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.waitReady(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	return c
}

func freeLoopbackPort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// start runs the server's process and waits until it listens for clients.
func (n *jsNode) start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	cfg, err := json.Marshal(n.cfg)
	if err != nil {
		return err
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), clusterChildEnv+"="+string(cfg))
	logf, err := os.OpenFile(filepath.Join(n.cfg.Dir, "server.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf // files: no copying goroutines
	// If the test binary dies, so do its servers.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	n.cmd = cmd
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.DialTimeout("tcp", n.addr(), time.Second); err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nats server %s did not listen on %s", n.cfg.Name, n.addr())
		}
	}
}

// kill sends SIGKILL and waits for the process to end.
func (n *jsNode) kill() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Kill()
	_ = n.cmd.Wait()
	n.cmd = nil
}

func (n *jsNode) addr() string { return fmt.Sprintf("127.0.0.1:%d", n.cfg.Port) }

// url lists every server, for a client that reconnects to any.
func (c *jsCluster) url() string {
	var u []string
	for _, n := range c.nodes {
		u = append(u, "nats://"+n.addr())
	}
	return strings.Join(u, ",")
}

func (c *jsCluster) node(name string) *jsNode {
	for _, n := range c.nodes {
		if n.cfg.Name == name {
			return n
		}
	}
	return nil
}

// waitReady waits until JetStream answers through the cluster (a meta
// leader is elected and every server is in).
func (c *jsCluster) waitReady(d time.Duration) error {
	nc, err := nats.Connect(c.url(), c.clientOptions()...)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := js.AccountInfo(ctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("jetstream cluster not ready: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// clientOptions make a client that tries every server and reconnects
// forever, as an application on a cluster would.
func (c *jsCluster) clientOptions() []nats.Option {
	return []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond)}
}

// streamCluster and consumerCluster return the replica state of a stream
// or consumer as the JetStream API reports it.
func streamCluster(ctx context.Context, js jetstream.JetStream, stream string) (*jetstream.ClusterInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	return st.CachedInfo().Cluster, nil
}

func consumerCluster(ctx context.Context, js jetstream.JetStream, stream, consumer string) (*jetstream.ClusterInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := js.Consumer(ctx, stream, consumer)
	if err != nil {
		return nil, err
	}
	return c.CachedInfo().Cluster, nil
}

// waitLeader polls info until it names a leader other than not ("" for
// any) and returns that server.
func (c *jsCluster) waitLeader(t testing.TB, d time.Duration, what, not string, info func() (*jetstream.ClusterInfo, error)) *jsNode {
	t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		ci, err := info()
		if err != nil || ci == nil || ci.Leader == "" || ci.Leader == not {
			continue
		}
		if n := c.node(ci.Leader); n != nil {
			return n
		}
	}
	t.Fatalf("no leader for %s (other than %q) within %v", what, not, d)
	return nil
}

// waitCurrent polls info until the leader and both replicas are up and
// current, so that the group survives the loss of any one server.
func waitCurrent(t testing.TB, d time.Duration, what string, info func() (*jetstream.ClusterInfo, error)) {
	t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		ci, err := info()
		if err != nil || ci == nil || ci.Leader == "" || len(ci.Replicas) != 2 {
			continue
		}
		ok := true
		for _, r := range ci.Replicas {
			ok = ok && r.Current && !r.Offline
		}
		if ok {
			return
		}
	}
	t.Fatalf("%s: replicas not current within %v", what, d)
}
