package testenv_test

import (
	"testing"

	"github.com/idem-go/idem/internal/testsupport/testenv"
)

// EnvInt gives the default when the variable is unset, and its value when
// it is a whole number of at least the least.
func TestEnvInt(t *testing.T) {
	const name = "IDEM_TESTENV_ENVINT"
	t.Setenv(name, "")
	if n := testenv.EnvInt(t, name, 7, 1); n != 7 {
		t.Fatalf("unset: %d, want the default 7", n)
	}
	t.Setenv(name, "1000")
	if n := testenv.EnvInt(t, name, 7, 1000); n != 1000 {
		t.Fatalf("1000 with least 1000: %d", n)
	}
}
