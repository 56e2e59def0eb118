package testenv

import (
	"os"
	"strconv"
	"testing"
)

// EnvInt is the whole number in the environment variable name (a count a
// long run sets, such as IDEM_BYTES_KEYS), or def when it is unset. A value
// that is not a whole number of at least least fails tb, naming the
// variable.
func EnvInt(tb testing.TB, name string, def, least int) int {
	tb.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < least {
		tb.Fatalf("%s=%q: want a whole number ≥ %d", name, v, least)
	}
	return n
}
