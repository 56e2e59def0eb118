package testenv

import "testing"

const redisInstall = "apt-get install -y redis-server"

var rd = envServer{what: "Redis", install: redisInstall, env: "IDEM_TEST_REDIS", start: startRedis}

// RedisAddr returns host:port of a Redis server started on first use
// (persistence off). Tests share it: give each test its own key prefix,
// for example [Name]("t_").
func RedisAddr(t testing.TB) string {
	t.Helper()
	return rd.get(t)
}

func startRedis() (string, error) {
	r, err := newRedisServer()
	if err != nil {
		return "", err
	}
	onStop(r.stop)
	return r.Addr, nil
}
