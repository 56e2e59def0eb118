package natsenv

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
	"testing"
	"time"

	"github.com/idem-go/idem/internal/testsupport/testport"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// childEnv carries a child's configuration (JSON) to the re-run binary.
const childEnv = "IDEM_NATSENV_CHILD"

func init() {
	if cfg := os.Getenv(childEnv); cfg != "" {
		os.Exit(runChild(cfg))
	}
}

// child is one server's configuration, passed to its process as JSON.
type child struct {
	Name        string `json:"name"`
	Port        int    `json:"port"`
	ClusterPort int    `json:"cluster_port"`
	Dir         string `json:"dir"`
	Routes      string `json:"routes"`
}

// runChild runs one clustered JetStream server until it is killed.
func runChild(raw string) int {
	var c child
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	opts := &server.Options{
		ServerName: c.Name, Host: "127.0.0.1", Port: c.Port, JetStream: true, StoreDir: c.Dir,
		NoSigs: true, NoLog: true,
	}
	if c.ClusterPort != 0 { // else a single server ([RunProcess])
		opts.Cluster = server.ClusterOpts{Name: "idem", Host: "127.0.0.1", Port: c.ClusterPort}
		opts.Routes = server.RoutesFromStr(c.Routes)
	}
	s, err := server.NewServer(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	s.Start()
	s.WaitForShutdown()
	return 0
}

// Cluster is three JetStream servers, each a child process, routed to each
// other on loopback.
type Cluster struct {
	nodes []*Node
}

// Node is one server of a [Cluster].
type Node struct {
	cfg child
	mu  sync.Mutex
	cmd *exec.Cmd
}

var shared struct {
	once sync.Once
	c    *Cluster
	err  error
}

// Start starts a cluster for t alone, storing in t's temp dirs, and waits
// until JetStream answers through it. Its servers are killed when t ends.
func Start(t testing.TB) *Cluster {
	t.Helper()
	var dirs []string
	for range 3 {
		dirs = append(dirs, t.TempDir())
	}
	c, err := start(dirs)
	// Registered after the temp dirs: cleanups run last-in first-out, so
	// the servers are dead before their directories are removed.
	if c != nil {
		t.Cleanup(c.kill)
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Shared returns one cluster for every test of the binary that kills no
// server (each should use a stream or bucket of its own). It is started on
// first use; call [StopShared] from TestMain after the tests.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	shared.once.Do(func() {
		var dirs []string
		for range 3 {
			dir, err := os.MkdirTemp("", "idem-natsenv-")
			if err != nil {
				shared.err = err
				return
			}
			dirs = append(dirs, dir)
		}
		shared.c, shared.err = start(dirs)
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.c
}

// StopShared kills the shared cluster, if one was started, and removes its
// directories.
func StopShared() {
	if c := shared.c; c != nil {
		c.kill()
		for _, n := range c.nodes {
			os.RemoveAll(n.cfg.Dir)
		}
	}
}

// start starts three servers storing in dirs and waits until the cluster
// is ready. On error the servers started are killed.
func start(dirs []string) (*Cluster, error) {
	c := &Cluster{}
	ports, err := freePorts(2 * len(dirs))
	if err != nil {
		return nil, err
	}
	var routes []string
	for i, dir := range dirs {
		p, cp := ports[2*i], ports[2*i+1]
		c.nodes = append(c.nodes, &Node{cfg: child{Name: fmt.Sprint("n", i+1), Port: p, ClusterPort: cp, Dir: dir}})
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", cp))
	}
	for _, n := range c.nodes {
		n.cfg.Routes = strings.Join(routes, ",")
		if err := n.Start(); err != nil {
			c.kill()
			return nil, err
		}
	}
	if err := c.waitReady(60 * time.Second); err != nil {
		c.kill()
		return nil, err
	}
	return c, nil
}

// freePorts returns n distinct loopback ports, each reserved for this
// process (package testport: below the kernel's ephemeral range, locked
// against the other test processes until this one exits), so that none is
// taken between its choice and the server's bind.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		p, err := testport.Free()
		if err != nil {
			return nil, err
		}
		ports = append(ports, p)
	}
	return ports, nil
}

func (c *Cluster) kill() {
	for _, n := range c.nodes {
		n.Kill()
	}
}

// Nodes returns the cluster's servers, n1, n2 and n3.
func (c *Cluster) Nodes() []*Node { return c.nodes }

// Node returns the server named name (as JetStream reports leaders), or nil.
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.nodes {
		if n.cfg.Name == name {
			return n
		}
	}
	return nil
}

// URL lists every server, for a client that reconnects to any.
func (c *Cluster) URL() string {
	var u []string
	for _, n := range c.nodes {
		u = append(u, "nats://"+n.Addr())
	}
	return strings.Join(u, ",")
}

// ClientOptions make a client that tries every server and reconnects
// forever, as an application on a cluster would.
func ClientOptions() []nats.Option {
	return []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond)}
}

// Connect returns a client of c made with [ClientOptions] and opts, closed
// when t ends.
func (c *Cluster) Connect(t testing.TB, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	return Connect(t, c.URL(), append(ClientOptions(), opts...)...)
}

// waitReady waits until JetStream answers through the cluster (a meta
// leader is elected and every server is in).
func (c *Cluster) waitReady(d time.Duration) error {
	nc, err := nats.Connect(c.URL(), ClientOptions()...)
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
			return fmt.Errorf("natsenv: jetstream cluster not ready: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Name is the server's name: n1, n2 or n3.
func (n *Node) Name() string { return n.cfg.Name }

// Addr is the server's client address.
func (n *Node) Addr() string { return fmt.Sprintf("127.0.0.1:%d", n.cfg.Port) }

// Start runs the server's process (again, after [Node.Kill]: same ports,
// same store directory) and waits until it listens for clients. Its log
// is server.log in its directory.
func (n *Node) Start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	cfg, err := json.Marshal(n.cfg)
	if err != nil {
		return err
	}
	bin, args := os.Args[0], []string{"-test.run=^$"}
	if cpus := os.Getenv(ServerCPUsEnv); cpus != "" {
		bin, args = "taskset", append([]string{"-c", cpus, bin}, args...)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), childEnv+"="+string(cfg))
	logf, err := os.OpenFile(filepath.Join(n.cfg.Dir, "server.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf // files: no copying goroutines
	cmd.SysProcAttr = dieWithParent()
	if err := cmd.Start(); err != nil {
		return err
	}
	n.cmd = cmd
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.DialTimeout("tcp", n.Addr(), time.Second); err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("natsenv: server %s did not listen on %s", n.cfg.Name, n.Addr())
		}
	}
}

// Kill sends SIGKILL and waits for the process to end. Killing a stopped
// node does nothing.
func (n *Node) Kill() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Kill()
	_ = n.cmd.Wait()
	n.cmd = nil
}
