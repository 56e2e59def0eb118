package testenv

import (
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

const redisInstall = "apt-get install -y redis-server"

var rd struct {
	once sync.Once
	addr string
	err  error
}

// RedisAddr returns host:port of a Redis server started on first use
// (persistence off). Tests share it: give each test its own key prefix,
// for example [Name]("t_").
func RedisAddr(t testing.TB) string {
	t.Helper()
	rd.once.Do(func() { rd.addr, rd.err = startRedis() })
	if rd.err != nil {
		Missing(t, "Redis", redisInstall, rd.err)
	}
	return rd.addr
}

func startRedis() (string, error) {
	if a := os.Getenv("IDEM_TEST_REDIS"); a != "" {
		return a, nil
	}
	bin, err := findBinary("redis-server", "/usr/bin", "/usr/local/bin")
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "idem-redis-")
	if err != nil {
		return "", err
	}
	port, err := freePort()
	if err != nil {
		return "", err
	}
	s, err := start(dir, nil, bin, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--dir", dir, "--protected-mode", "no")
	if err != nil {
		return "", err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			s.stop(syscall.SIGTERM)
			return "", fmt.Errorf("redis did not answer: %v; log:\n%s", err, s.logTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
	onStop(func() { s.stop(syscall.SIGTERM) })
	return addr, nil
}
