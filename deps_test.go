package idem_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCoreImportsNoThirdParty keeps the core packages free of third-party
// modules, so that only the backends, adapters and cmd pull in clients and
// they can become separate modules later.
func TestCoreImportsNoThirdParty(t *testing.T) {
	core := []string{".", "./sqldialect", "./inbox", "./keystore", "./sequence", "./window", "./versiongate", "./idemhttp"}
	var pkgs []string
	for _, p := range core {
		if files, _ := filepath.Glob(filepath.Join(p, "*.go")); len(files) > 0 {
			pkgs = append(pkgs, p)
		}
	}
	out, err := exec.Command("go", append([]string{"list", "-deps"}, pkgs...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		first := strings.Split(dep, "/")[0]
		if strings.Contains(first, ".") && !strings.HasPrefix(dep, "github.com/idem-go/idem") {
			t.Errorf("a core package depends on third-party package %s", dep)
		}
	}
}
