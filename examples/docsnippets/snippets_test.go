package docsnippets_test

import (
	"bytes"
	"context"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/testsupport/testenv"
)

// The rules are in doc.go. In short: every ```go block of README.md and
// docs/**/*.md is a complete program (built, and run unless marked
// build-only) or is mirrored, byte for byte after gofmt, by a function of a
// program under testdata/ (built, and run when marked //docsnippets:run).

const (
	testdata    = "examples/docsnippets/testdata" // mirrors, relative to the repository root
	runMark     = "//docsnippets:run"
	buildOnly   = "//docsnippets:build-only"
	fixFragment = "make it a complete program (package main, its imports, a main that runs it with SQLite or memstore), " +
		"or mirror it: put <!-- snippet: " + testdata + "/NAME/main.go:FUNC --> on the line before it and copy the block into the body of FUNC " +
		"in that program (see examples/docsnippets/doc.go)"
)

var (
	mirrorRE    = regexp.MustCompile(`^<!--\s*snippet:\s*(\S+\.go):([A-Za-z_][A-Za-z0-9_]*)\s*-->$`)
	buildOnlyRE = regexp.MustCompile(`^<!--\s*snippet:\s*build-only\b.*-->$`)
)

// block is one ```go block of a Markdown file.
type block struct {
	file   string // relative to the repository root
	line   int    // of the ```go fence, 1-based
	text   string
	marker string // the line before the fence when it is a snippet comment
}

func (b block) String() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

// program is a main package to build: a block written out, or a mirror.
type program struct {
	dir  string // absolute
	what string // for messages
	run  bool
}

func TestDocCodeBlocks(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("go", "env", "GOWORK").Output(); err != nil || strings.TrimSpace(string(out)) == "" || strings.TrimSpace(string(out)) == "off" {
		testenv.Cannot(t, "the documentation's programs build in the repository's go.work workspace, and GOWORK is off: unset GOWORK to run this test")
	}
	blocks := readBlocks(t, root)
	if len(blocks) == 0 {
		t.Fatal("no ```go block found in README.md and docs/: is the repository root ../..?")
	}
	gen, err := os.MkdirTemp(filepath.Join(root, testdata), ".gen-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(gen) })

	var progs []program
	mirrored := map[string]bool{} // mirror files used by a block
	for i, b := range blocks {
		switch m := mirrorRE.FindStringSubmatch(b.marker); {
		case m != nil:
			mirrored[filepath.Clean(m[1])] = true
			checkMirror(t, root, b, m[1], m[2])
		case strings.HasPrefix(strings.TrimSpace(b.text), "package main"):
			dir := filepath.Join(gen, fmt.Sprintf("b%02d_%s_%d", i, slug(b.file), b.line))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(b.text), 0o644); err != nil {
				t.Fatal(err)
			}
			progs = append(progs, program{dir: dir, what: b.String(), run: !buildOnlyRE.MatchString(b.marker)})
		default:
			t.Errorf("%s: this ```go block is neither a complete program nor mirrored: %s", b, fixFragment)
		}
	}

	// Every program under testdata/ is built, and run when it says so; one
	// that no block mirrors is stale.
	entries, err := os.ReadDir(filepath.Join(root, testdata))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		rel := filepath.Join(testdata, e.Name(), "main.go")
		src, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Errorf("%s: %v (each directory of testdata/ is one mirror program, main.go)", rel, err)
			continue
		}
		if !mirrored[rel] {
			t.Errorf("%s mirrors no block of the documentation: delete it, or mark the block with <!-- snippet: %s:FUNC -->", rel, rel)
		}
		run := hasLine(src, runMark)
		if !run && !hasLinePrefix(src, buildOnly+" ") {
			t.Errorf("%s: say whether the test runs it: a line %s (it needs no server), or %s REASON", rel, runMark, buildOnly)
		}
		progs = append(progs, program{dir: filepath.Join(root, testdata, e.Name()), what: rel, run: run})
	}
	if t.Failed() {
		return
	}

	bin := t.TempDir()
	args := []string{"build", "-o", bin + string(filepath.Separator)}
	for _, p := range progs {
		rel, err := filepath.Rel(filepath.Join(root, "examples"), p.dir)
		if err != nil {
			t.Fatal(err)
		}
		args = append(args, "./"+filepath.ToSlash(rel))
	}
	build := exec.Command("go", args...)
	build.Dir = filepath.Join(root, "examples")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("the documentation's code does not build (a b<N>_<file>_<line> directory is the block at that line of that file):\n%s", out)
	}
	for _, p := range progs {
		if !p.run {
			continue
		}
		t.Run(p.what, func(t *testing.T) {
			exe := filepath.Join(bin, filepath.Base(p.dir))
			if runtime.GOOS == "windows" {
				exe += ".exe"
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, exe)
			cmd.Dir = t.TempDir() // files the program creates (app.db) go with it
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s: the program fails: %v\n%s", p.what, err, out)
			}
			t.Logf("%s:\n%s", p.what, out)
		})
	}
}

// readBlocks returns the ```go blocks of README.md and docs/**/*.md.
func readBlocks(t *testing.T, root string) []block {
	t.Helper()
	files := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, err := filepath.Rel(root, path)
			files = append(files, rel)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var blocks []block
	for _, f := range files {
		src, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(src), "\n")
		for i := 0; i < len(lines); i++ {
			if strings.TrimSpace(lines[i]) != "```go" {
				continue
			}
			b := block{file: filepath.ToSlash(f), line: i + 1}
			for j := i - 1; j >= 0; j-- {
				if s := strings.TrimSpace(lines[j]); s != "" {
					if strings.HasPrefix(s, "<!--") {
						b.marker = s
					}
					break
				}
			}
			var body []string
			for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
				body = append(body, lines[i])
			}
			b.text = strings.Join(body, "\n") + "\n"
			blocks = append(blocks, b)
		}
	}
	return blocks
}

// checkMirror fails t unless b's text is, after gofmt, the body of function
// fn in the program file rel.
func checkMirror(t *testing.T, root string, b block, rel, fn string) {
	t.Helper()
	if !strings.HasPrefix(filepath.ToSlash(filepath.Clean(rel)), testdata+"/") {
		t.Errorf("%s: mirror %s is not under %s, where the test builds the mirrors", b, rel, testdata)
		return
	}
	src, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Errorf("%s: the block's mirror: %v", b, err)
		return
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, rel, src, parser.ParseComments)
	if err != nil {
		t.Errorf("%s: the block's mirror: %v", b, err)
		return
	}
	var body string
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && fd.Name.Name == fn && fd.Body != nil {
			body = string(src[fset.Position(fd.Body.Lbrace).Offset+1 : fset.Position(fd.Body.Rbrace).Offset])
		}
	}
	if body == "" {
		t.Errorf("%s: %s has no function %s with a body (the <!-- snippet --> line names it)", b, rel, fn)
		return
	}
	want, err := normalize(body)
	if err != nil {
		t.Errorf("%s: %s: %v", b, rel, err)
		return
	}
	got, err := normalize(b.text)
	if err != nil {
		t.Errorf("%s: the block does not parse as a function body: %v", b, err)
		return
	}
	if got != want {
		t.Errorf("%s: the block differs from the body of %s in %s; copy one onto the other (gofmt-normalised):\n--- block\n%s--- %s\n%s", b, fn, rel, got, fn, want)
	}
}

// normalize gofmts a function body and returns it unindented.
func normalize(body string) (string, error) {
	src, err := format.Source([]byte("package p\n\nfunc _() {\n" + strings.Trim(body, "\n") + "\n}\n"))
	if err != nil {
		return "", err
	}
	s := string(src)
	s = s[strings.Index(s, "{\n")+2 : strings.LastIndex(s, "}")]
	var out []string
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		out = append(out, strings.TrimPrefix(l, "\t"))
	}
	return strings.Join(out, "\n") + "\n", nil
}

func slug(file string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, strings.TrimSuffix(file, ".md"))
}

func hasLine(src []byte, line string) bool {
	return slices.ContainsFunc(bytes.Split(src, []byte("\n")), func(l []byte) bool { return string(bytes.TrimSpace(l)) == line })
}

func hasLinePrefix(src []byte, prefix string) bool {
	return slices.ContainsFunc(bytes.Split(src, []byte("\n")), func(l []byte) bool { return bytes.HasPrefix(bytes.TrimSpace(l), []byte(prefix)) })
}
