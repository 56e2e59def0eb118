package idem_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCoreImportsNoThirdParty keeps the core packages free of third-party
// modules, so that only the backends, adapters and cmd pull in clients and
// they can become separate modules later. idemhttp may use the structured
// field parser, the JSON canonicaliser (RFC 8785) and JMESPath (with the
// x/exp package it imports), and nothing else.
func TestCoreImportsNoThirdParty(t *testing.T) {
	allowed := map[string][]string{
		".": nil, "./sqldialect": nil, "./inbox": nil, "./keystore": nil, "./sequence": nil,
		"./window": nil, "./versiongate": nil, "./outbox": nil, "./idemhttp": {"github.com/dunglas/httpsfv", "github.com/gowebpki/jcs", "github.com/jmespath-community/go-jmespath", "golang.org/x/exp/constraints"},
	}
	for pkg, allow := range allowed {
		if files, _ := filepath.Glob(filepath.Join(pkg, "*.go")); len(files) == 0 {
			continue
		}
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", pkg, err, out)
		}
	deps:
		for _, dep := range strings.Fields(string(out)) {
			first := strings.Split(dep, "/")[0]
			if !strings.Contains(first, ".") || strings.HasPrefix(dep, "github.com/idem-go/idem") {
				continue
			}
			for _, a := range allow {
				if strings.HasPrefix(dep, a) {
					continue deps
				}
			}
			t.Errorf("%s depends on third-party package %s", pkg, dep)
		}
	}
}
