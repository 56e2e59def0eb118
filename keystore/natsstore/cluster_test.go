package natsstore_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/idem-go/idem/internal/testsupport/natsenv"
	"github.com/idem-go/idem/internal/testsupport/testenv"
)

// The tests run on 3-server JetStream clusters from internal/testsupport/natsenv: one
// shared by the tests that kill no server (each on a bucket of its own),
// and one of its own for each test that does.

func TestMain(m *testing.M) {
	code := testenv.Main(m)
	natsenv.StopShared()
	if err := goleak.Find(); code == 0 && err != nil {
		fmt.Fprintln(os.Stderr, "goleak:", err)
		code = 1
	}
	os.Exit(code)
}
