package testenv

import (
	"os"
	"testing"
)

const redisInstall = "apt-get install -y redis-server"

var rd shared[string]

// RedisAddr returns host:port of a Redis server started on first use
// (persistence off). Tests share it: give each test its own key prefix,
// for example [Name]("t_").
func RedisAddr(t testing.TB) string {
	t.Helper()
	return rd.get(t, "Redis", redisInstall, startRedis)
}

func startRedis() (string, error) {
	if a := os.Getenv("IDEM_TEST_REDIS"); a != "" {
		return a, nil
	}
	r, err := newRedisServer()
	if err != nil {
		return "", err
	}
	onStop(r.stop)
	return r.Addr, nil
}
