package testenv

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/testsupport/testport"
)

const rabbitInstall = "apt-get install -y rabbitmq-server"

var rmq = envServer{what: "RabbitMQ", install: rabbitInstall, env: "IDEM_TEST_RABBITMQ", start: startRabbitMQ}

// RabbitMQURL returns the amqp:// URL of a RabbitMQ broker (user guest,
// vhost "/") started on first use from Debian's rabbitmq-server package, in
// a temp dir, on free ports, with its own Erlang port mapper. Tests share
// it: give each test its own queue and exchange names, for example
// [Name]("t_"). IDEM_TEST_RABBITMQ (an amqp:// URL) selects an existing
// broker instead.
func RabbitMQURL(t testing.TB) string {
	t.Helper()
	return rmq.get(t)
}

func startRabbitMQ() (string, error) {
	// The script in /usr/lib/rabbitmq/bin runs the node directly; the one
	// on PATH (/usr/sbin) is a wrapper that switches to the rabbitmq user
	// and ignores our environment.
	bin, err := findBinary("rabbitmq-server", "/usr/lib/rabbitmq/bin")
	if err != nil {
		return "", err
	}
	if alt := "/usr/lib/rabbitmq/bin/rabbitmq-server"; bin != alt {
		if st, err := os.Stat(alt); err == nil && st.Mode()&0o111 != 0 {
			bin = alt
		}
	}
	dir, err := os.MkdirTemp("", "idem-rabbitmq-")
	if err != nil {
		return "", err
	}
	var ports [3]int
	for i := range ports {
		if ports[i], err = testport.Free(); err != nil {
			return "", err
		}
	}
	amqpPort, distPort, epmdPort := ports[0], ports[1], ports[2]
	conf := filepath.Join(dir, "rabbitmq.conf")
	confText := fmt.Sprintf("listeners.tcp.default = 127.0.0.1:%d\nloopback_users = none\n"+
		"log.console = true\nlog.file = false\ndisk_free_limit.absolute = 1MB\n", amqpPort)
	if err := os.WriteFile(conf, []byte(confText), 0o600); err != nil {
		return "", err
	}
	plugins := filepath.Join(dir, "enabled_plugins")
	if err := os.WriteFile(plugins, []byte("[].\n"), 0o600); err != nil {
		return "", err
	}
	node := Name("idem") + "@localhost"
	env := append(os.Environ(),
		"HOME="+dir, // the Erlang cookie is written here
		"RABBITMQ_NODENAME="+node,
		"RABBITMQ_USE_LONGNAME=false",
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		fmt.Sprintf("RABBITMQ_NODE_PORT=%d", amqpPort),
		fmt.Sprintf("RABBITMQ_DIST_PORT=%d", distPort),
		fmt.Sprintf("ERL_EPMD_PORT=%d", epmdPort),
		"RABBITMQ_CONFIG_FILE="+conf,
		"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(dir, "advanced.config"),
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(dir, "rabbitmq-env.conf"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+plugins,
		"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(dir, "log"),
		"RABBITMQ_PID_FILE="+filepath.Join(dir, "rabbit.pid"),
		"RABBITMQ_PLUGINS_EXPAND_DIR="+filepath.Join(dir, "plugins-expand"),
	)
	s, err := startEnv(dir, env, bin)
	if err != nil {
		return "", err
	}
	stop := func() {
		s.stop(syscall.SIGTERM)
		// The node started its own port mapper on epmdPort; it outlives
		// the node unless told to stop.
		if epmd, err := findBinary("epmd", "/usr/lib/erlang/erts-*/bin"); err == nil {
			_ = exec.Command(epmd, "-port", fmt.Sprint(epmdPort), "-kill").Run()
		}
	}
	addr := fmt.Sprintf("127.0.0.1:%d", amqpPort)
	if err := waitAMQP(addr, s, 90*time.Second); err != nil {
		stop()
		return "", err
	}
	onStop(stop)
	return "amqp://guest:guest@" + addr + "/", nil
}

// waitAMQP waits until addr completes the AMQP 0-9-1 protocol header
// exchange (the broker answers the header with connection.start), which
// only happens once the broker has booted, not merely bound the port.
func waitAMQP(addr string, s *server, d time.Duration) error {
	deadline := time.Now().Add(d)
	var err error
	for time.Now().Before(deadline) {
		select {
		case <-s.exited:
			return fmt.Errorf("rabbitmq-server exited: %v; log:\n%s", s.cmd.ProcessState, s.logTail())
		default:
		}
		if err = amqpHello(addr); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("rabbitmq did not answer on %s: %v; log:\n%s", addr, err, s.logTail())
}

func amqpHello(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("AMQP\x00\x00\x09\x01")); err != nil {
		return err
	}
	var b [7]byte // frame header: type 1 (method), channel 0, size
	if _, err := c.Read(b[:]); err != nil {
		return err
	}
	if b[0] != 1 {
		return fmt.Errorf("unexpected AMQP frame type %d", b[0])
	}
	return nil
}
