package idemcaddy_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/testsupport/testenv"
)

// binDir holds Caddy with this module (internal/caddymain), built once per
// test binary on first use, without -race: it is the process under test,
// not the test.
var (
	binDir    string
	buildOnce sync.Once
	caddyBin  string
	buildErr  error
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "idemcaddy-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binDir = dir
	return testenv.Main(m)
}

// needCaddy returns the Caddy binary, building it on first use, and fails
// t if it cannot be built: the go toolchain that runs the test builds it,
// so there is nothing to install and nothing to skip.
func needCaddy(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		bin := filepath.Join(binDir, "caddy")
		start := time.Now()
		out, err := exec.Command("go", "build", "-o", bin, "./internal/caddymain").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build ./internal/caddymain: %v\n%s", err, out)
			return
		}
		caddyBin = bin
		t.Logf("built Caddy with idemcaddy in %v", time.Since(start).Round(time.Millisecond))
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return caddyBin
}
