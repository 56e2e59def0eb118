package main

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
)

// hostileConfigs are files that made goccy/go-yaml take memory with the
// square of their depth (0.7 GB for 40 KB of "[[[["): each must be refused
// at the line where it crosses maxConfigDepth.
func hostileConfigs() []struct{ name, file, at string } {
	const deep = 100_000
	var block strings.Builder
	block.WriteString("routes:\n")
	for i := 1; i <= 80; i++ {
		block.WriteString(strings.Repeat(" ", i) + "a:\n")
	}
	return []struct{ name, file, at string }{
		{"flow sequences", "routes: " + strings.Repeat("[", deep), "f.yaml:1:"},
		{"flow mappings", "routes:\n  - pattern: /a\n    scope: " + strings.Repeat("{a: ", deep), "f.yaml:3:"},
		{"top-level flow mappings", strings.Repeat("a: {", deep), "f.yaml:1:"},
		{"block mappings", block.String(), "f.yaml:65:"},
		{"compact sequences", "routes:\n  " + strings.Repeat("- ", deep) + "x\n", "f.yaml:2:"},
		{"tab-separated sequences", "-\t" + strings.Repeat("[", deep), "f.yaml:1:"},
		{"anchored", "routes: &a " + strings.Repeat("[", deep), "f.yaml:1:"},
		{"after a multi-line quote", "routes: ['a\n  b', " + strings.Repeat("[", deep), "f.yaml:2:"},
	}
}

// Issue 28 item 7: a deeply nested file is refused quickly, before the
// parser runs, with the file and line, and without the memory the parser
// would have taken. Not parallel: it measures the process's allocations.
func TestParseConfigRefusesDeepNesting(t *testing.T) {
	for _, tc := range hostileConfigs() {
		t.Run(tc.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			_, err := parseConfig("f.yaml", []byte(tc.file))
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			if err == nil || !errors.Is(err, errConfig) || !strings.Contains(err.Error(), tc.at+" nesting deeper than 64 levels") {
				t.Fatalf("got %v; want an errConfig at %s saying nesting deeper than 64 levels", err, tc.at)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4<<20 {
				t.Errorf("refusing a %d-byte file allocated %d bytes", len(tc.file), alloc)
			}
			if took > 2*time.Second {
				t.Errorf("refusing a %d-byte file took %v", len(tc.file), took)
			}
		})
	}
}

// The size limit: a file over 1 MiB is refused by name, without being read
// whole.
func TestReadConfigRefusesLargeFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "big.yaml")
	writeFile(t, path, "routes:\n  - pattern: /a\n"+strings.Repeat("# padding\n", maxConfigSize/10))
	_, err := readConfig(path)
	if err == nil || !errors.Is(err, errConfig) || !strings.Contains(err.Error(), path+": larger than 1048576 bytes") {
		t.Fatalf("got %v; want %s refused as larger than 1 MiB", err, path)
	}
	if _, err := parseConfig("f.yaml", make([]byte, maxConfigSize+1)); err == nil || !strings.Contains(err.Error(), "f.yaml: larger than") {
		t.Fatalf("parseConfig of 1 MiB + 1: %v", err)
	}
}

// The scan counts structure, not text: brackets in quotes, comments, plain
// scalars and block scalars are no nesting, and real files pass.
func TestConfigShapeAccepts(t *testing.T) {
	t.Parallel()
	deepText := strings.Repeat("[{", 100)
	for name, file := range map[string]string{
		"quoted":          "routes:\n  - pattern: '/a/" + deepText + "'\n    methods: [\"" + deepText + "\\\"\", 'it''s " + deepText + "']\n",
		"comments":        "# " + deepText + "\nroutes: # " + deepText + "\n  - pattern: /a # " + deepText + "\n",
		"plain scalars":   "routes:\n  - pattern: /v1/{id}/" + deepText + "\n    note: don't " + deepText + "\n",
		"block scalar":    "routes:\n  - pattern: |\n" + strings.Repeat("      "+deepText+"\n", 3) + strings.Repeat(" ", 200) + "x\n  - pattern: /b\n",
		"multi-line flow": "routes: [\n  {pattern: /a,\n   methods: [POST,\n      PUT]},\n  {pattern: /b}]\n",
		"64 levels":       "routes: " + strings.Repeat("[", 63) + strings.Repeat("]", 63) + "\n",
		"documents":       "---\nroutes:\n  - pattern: /a\n...\n---\nroutes: []\n",
		"anchors":         "routes:\n  - &r {pattern: /a, scope: &s {header: X-Tenant}}\n  - pattern: /b\n    scope: *s\n",
	} {
		if err := checkConfigShape("f.yaml", []byte(file)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if b, err := os.ReadFile("../../../docs/examples/idem-serve.yaml"); err == nil {
		if err := checkConfigShape("idem-serve.yaml", b); err != nil {
			t.Errorf("docs/examples/idem-serve.yaml: %v", err)
		}
	}
}

// yamlDepth is the nesting of goccy/go-yaml's tree for data: collections
// and standalone mapping entries, each one level.
func yamlDepth(data []byte) int {
	f, err := parser.ParseBytes(data, 0)
	if err != nil {
		return 0
	}
	var depth func(n ast.Node, inMapping bool) int
	depth = func(n ast.Node, inMapping bool) int {
		switch n := n.(type) {
		case *ast.DocumentNode:
			return depth(n.Body, false)
		case *ast.MappingNode:
			return 1 + deepest(n.Values, func(v ast.Node) int { return depth(v, true) })
		case *ast.MappingValueNode:
			d := max(depth(n.Key, false), depth(n.Value, false))
			if !inMapping {
				d++
			}
			return d
		case *ast.MappingKeyNode:
			return depth(n.Value, false)
		case *ast.SequenceNode:
			return 1 + deepest(n.Values, func(v ast.Node) int { return depth(v, false) })
		case *ast.AnchorNode:
			return depth(n.Value, inMapping)
		case *ast.TagNode:
			return depth(n.Value, inMapping)
		}
		return 0
	}
	return deepest(f.Docs, func(v ast.Node) int { return depth(v, false) })
}

// deepest is the largest depth of ns, 0 for none.
func deepest[N ast.Node](ns []N, depth func(ast.Node) int) int {
	d := 0
	for _, n := range ns {
		d = max(d, depth(n))
	}
	return d
}
