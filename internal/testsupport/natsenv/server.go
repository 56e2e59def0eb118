package natsenv

import (
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Run starts an embedded JetStream server storing in dir, on port (-1 for
// a free one), and shuts it down when t ends.
func Run(t testing.TB, dir string, port int) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{JetStream: true, StoreDir: dir, Host: "127.0.0.1", Port: port, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

// ServerCPUsEnv is testenv's variable of the same name: set to a CPU list
// in taskset's syntax, the server processes that natsenv starts ([Start],
// [Shared], [RunProcess]) run on those CPUs only. Embedded servers ([Run])
// share the test binary's.
const ServerCPUsEnv = "IDEM_TEST_SERVER_CPUS"

// RunProcess starts one JetStream server storing in dir in a process of its
// own (the test binary, run again), pinned as [ServerCPUsEnv] says, and
// returns its client URL; the server is killed when t ends. A benchmark
// uses it to keep the broker's CPU apart from its own.
func RunProcess(t testing.TB, dir string) string {
	t.Helper()
	ports, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	n := &Node{cfg: child{Name: "n1", Port: ports[0], Dir: dir}}
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Kill)
	return "nats://" + n.Addr()
}

// Port is the client port s listens on.
func Port(s *server.Server) int { return s.Addr().(*net.TCPAddr).Port }

// Connect returns a connection to url and its JetStream client, closed when
// t ends.
func Connect(t testing.TB, url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
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
