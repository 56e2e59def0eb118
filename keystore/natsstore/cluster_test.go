package natsstore_test

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
	"go.uber.org/goleak"

	"github.com/idem-go/idem/internal/testenv"
)

// A 3-server JetStream cluster on loopback. Each server is this test
// binary run again as a child process (IDEM_NATS_CHILD set), an embedded
// nats-server with routes to the other two, so that a test can kill one
// with SIGKILL (a crash, not a shutdown) and start it again on the same
// store directory.

const childEnv = "IDEM_NATS_CHILD"

// child is one server's configuration, passed to the child process.
type child struct {
	Name        string `json:"name"`
	Port        int    `json:"port"`
	ClusterPort int    `json:"cluster_port"`
	Dir         string `json:"dir"`
	Routes      string `json:"routes"`
}

func TestMain(m *testing.M) {
	if cfg := os.Getenv(childEnv); cfg != "" {
		runChild(cfg)
		return
	}
	code := testenv.Main(m)
	stopClusters()
	if err := goleak.Find(); code == 0 && err != nil {
		fmt.Fprintln(os.Stderr, "goleak:", err)
		code = 1
	}
	os.Exit(code)
}

// runChild runs one clustered JetStream server until it is killed.
func runChild(raw string) {
	var c child
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	opts := &server.Options{
		ServerName: c.Name, Host: "127.0.0.1", Port: c.Port, JetStream: true, StoreDir: c.Dir,
		Cluster: server.ClusterOpts{Name: "idem", Host: "127.0.0.1", Port: c.ClusterPort},
		Routes:  server.RoutesFromStr(c.Routes), NoSigs: true, NoLog: true,
	}
	s, err := server.NewServer(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	s.Start()
	s.WaitForShutdown()
}

// natsCluster is three child servers.
type natsCluster struct {
	nodes []*natsNode
}

type natsNode struct {
	cfg child
	mu  sync.Mutex
	cmd *exec.Cmd
}

var (
	clustersMu sync.Mutex
	clusters   []*natsCluster
	shared     struct {
		once sync.Once
		c    *natsCluster
		err  error
	}
)

func stopClusters() {
	clustersMu.Lock()
	defer clustersMu.Unlock()
	for _, c := range clusters {
		c.stop()
	}
	clusters = nil
}

// sharedCluster is one cluster for every test of the binary that does not
// kill servers (each uses a bucket of its own).
func sharedCluster(t testing.TB) *natsCluster {
	shared.once.Do(func() { shared.c, shared.err = startCluster() })
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.c
}

// ownCluster is a cluster for t alone, stopped when t ends.
func ownCluster(t testing.TB) *natsCluster {
	c, err := startCluster()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.stop)
	return c
}

func startCluster() (*natsCluster, error) {
	c := &natsCluster{}
	var routes []string
	for i := range 3 {
		dir, err := os.MkdirTemp("", "idem-nats-")
		if err != nil {
			return nil, err
		}
		p, cp := freePort(), freePort()
		c.nodes = append(c.nodes, &natsNode{cfg: child{Name: fmt.Sprint("n", i+1), Port: p, ClusterPort: cp, Dir: dir}})
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", cp))
	}
	for _, n := range c.nodes {
		n.cfg.Routes = strings.Join(routes, ",")
		if err := n.start(); err != nil {
			c.stop()
			return nil, err
		}
	}
	clustersMu.Lock()
	clusters = append(clusters, c)
	clustersMu.Unlock()
	if err := c.waitReady(30 * time.Second); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func (n *natsNode) start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	cfg, _ := json.Marshal(n.cfg)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(cfg))
	logf, err := os.OpenFile(filepath.Join(n.cfg.Dir, "server.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	n.cmd = cmd
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.DialTimeout("tcp", n.addr(), time.Second); err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nats server %s did not listen", n.cfg.Name)
		}
	}
}

// kill sends SIGKILL and waits for the process to end.
func (n *natsNode) kill() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Kill()
	_ = n.cmd.Wait()
	n.cmd = nil
}

func (n *natsNode) addr() string { return fmt.Sprintf("127.0.0.1:%d", n.cfg.Port) }

func (c *natsCluster) stop() {
	for _, n := range c.nodes {
		n.kill()
		os.RemoveAll(n.cfg.Dir)
	}
}

// url lists every server, for a client that reconnects to any.
func (c *natsCluster) url() string {
	var u []string
	for _, n := range c.nodes {
		u = append(u, "nats://"+n.addr())
	}
	return strings.Join(u, ",")
}

// waitReady waits until JetStream answers through the cluster (a meta
// leader is elected and every server is in).
func (c *natsCluster) waitReady(d time.Duration) error {
	nc, err := nats.Connect(c.url(), nats.MaxReconnects(-1))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
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

// connect returns a JetStream client of c that reconnects forever, closed
// when t ends.
func connect(t testing.TB, c *natsCluster) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(c.url(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// leader returns the node that leads stream.
func (c *natsCluster) leader(t testing.TB, js jetstream.JetStream, stream string) *natsNode {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err := js.Stream(ctx, stream)
		cancel()
		if err != nil || st.CachedInfo().Cluster == nil {
			continue
		}
		for _, n := range c.nodes {
			if n.cfg.Name == st.CachedInfo().Cluster.Leader {
				return n
			}
		}
	}
	t.Fatalf("no leader for %s", stream)
	return nil
}
