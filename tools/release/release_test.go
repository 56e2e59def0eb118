package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

// fixture writes a small workspace: a root module, two nested modules that
// require it the way idem's did before v0.1.0 (v0.0.0 and a zero
// pseudo-version, with relative replaces) and an unreleased tool.
func fixture(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"go.work":      "go 1.26.0\n\nuse (\n\t.\n\t./a\n\t./b/c\n\t./tool\n)\n",
		"versions.txt": "# versions\nversion v0.1.0\n\nunreleased tool\n",
		"go.mod":       "module example.com/x\n\ngo 1.26.0\n",
		"x.go":         "package x\n\nfunc X() {}\n",
		"a/go.mod": "module example.com/x/a\n\ngo 1.26.0\n\nrequire example.com/x v0.0.0\n\n" +
			"// kept in step by hand\nreplace example.com/x => ../\n",
		"a/a.go": "package a\n",
		"b/c/go.mod": "module example.com/x/b/c\n\ngo 1.26.0\n\nrequire (\n\texample.com/x v0.1.0\n" +
			"\texample.com/x/a v0.0.0-00010101000000-000000000000\n\tgolang.org/x/mod v0.43.0\n)\n",
		"b/c/c.go":    "package c\n",
		"tool/go.mod": "module example.com/x/tool\n\ngo 1.26.0\n\nrequire example.com/x v0.1.0\n",
	}
	for name, data := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// mustLoad is loadRepo(dir); an error fails the test.
func mustLoad(t *testing.T, dir string) *Repo {
	t.Helper()
	repo, err := loadRepo(dir)
	if err != nil {
		t.Fatal(err)
	}
	return repo
}

func TestSetCheckTags(t *testing.T) {
	t.Parallel()
	dir := fixture(t)
	repo := mustLoad(t, dir)
	ps := strings.Join(repo.problems(), "\n")
	for _, want := range []string{
		"a/go.mod requires example.com/x v0.0.0, not v0.1.0",
		"a/go.mod:8: replace example.com/x",
		"b/c/go.mod requires example.com/x/a v0.0.0-00010101000000-000000000000",
		"go.work: the replace directives",
	} {
		if !strings.Contains(ps, want) {
			t.Errorf("problems lack %q:\n%s", want, ps)
		}
	}

	if err := repo.Set("v0.2.0"); err != nil {
		t.Fatal(err)
	}
	repo = mustLoad(t, dir)
	if ps := repo.problems(); len(ps) > 0 {
		t.Errorf("after set, check reports:\n%s", strings.Join(ps, "\n"))
	}
	if repo.Version != "v0.2.0" {
		t.Errorf("versions.txt has %s after set v0.2.0", repo.Version)
	}
	a, _ := os.ReadFile(filepath.Join(dir, "a", "go.mod"))
	if strings.Contains(string(a), "replace") || !strings.Contains(string(a), "require example.com/x v0.2.0") {
		t.Errorf("a/go.mod after set:\n%s", a)
	}
	c, _ := os.ReadFile(filepath.Join(dir, "b", "c", "go.mod"))
	if !strings.Contains(string(c), "golang.org/x/mod v0.43.0") || !strings.Contains(string(c), "example.com/x/a v0.2.0") {
		t.Errorf("b/c/go.mod after set (a sibling at v0.2.0, other requirements as they were):\n%s", c)
	}
	work, _ := os.ReadFile(filepath.Join(dir, "go.work"))
	for _, want := range []string{"example.com/x v0.2.0 => ./", "example.com/x/a v0.2.0 => ./a"} {
		if !strings.Contains(string(work), want) {
			t.Errorf("go.work lacks %q:\n%s", want, work)
		}
	}
	if err := repo.Set("v0.2.0"); err != nil { // idempotent
		t.Fatal(err)
	}

	var tags []string
	for _, m := range repo.Released() {
		tags = append(tags, m.Tag("v0.2.0"))
	}
	if got, want := strings.Join(tags, " "), "v0.2.0 a/v0.2.0 b/c/v0.2.0"; got != want {
		t.Errorf("tags %q, want %q", got, want)
	}
}

func TestWriteProxy(t *testing.T) {
	t.Parallel()
	dir := fixture(t)
	repo := mustLoad(t, dir)
	proxy := t.TempDir()
	const v = "v0.3.0-rc.1"
	if err := repo.WriteProxy(proxy, v); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"example.com/x", "example.com/x/a", "example.com/x/b/c"} {
		at := filepath.Join(proxy, filepath.FromSlash(m), "@v")
		mod, err := os.ReadFile(filepath.Join(at, v+".mod"))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(mod), "replace") || strings.Contains(string(mod), "v0.0.0") {
			t.Errorf("%s.mod:\n%s", m, mod)
		}
		cf, err := zip.CheckZip(module.Version{Path: m, Version: v}, filepath.Join(at, v+".zip"))
		if err != nil {
			t.Fatalf("%s: %v", m, err)
		}
		for _, f := range cf.Valid {
			if strings.HasPrefix(f, "b/") || strings.HasPrefix(f, "a/") || strings.HasPrefix(f, "tool/") {
				t.Errorf("%s's zip holds %s, a nested module's file", m, f)
			}
		}
		if list, _ := os.ReadFile(filepath.Join(at, "list")); string(list) != v+"\n" {
			t.Errorf("%s list %q", m, list)
		}
	}
	if fileExists(filepath.Join(proxy, "example.com", "x", "tool")) {
		t.Error("the unreleased module is in the proxy")
	}
}

func TestVersions(t *testing.T) {
	t.Parallel()
	for v, ok := range map[string]bool{"v0.1.0": true, "v1.4.2": true, "v0.2.0-rc.1": true, "v0.2": false, "0.2.0": false, "v2.0.0": false} {
		if err := checkVersion(v); (err == nil) != ok {
			t.Errorf("checkVersion(%s) = %v", v, err)
		}
	}
	for _, c := range []struct {
		base, next string
		breaks     bool
	}{
		{"v0.1.0", "v0.1.0", false},
		{"v0.1.0", "v0.1.5", false},
		{"v0.1.0", "v0.2.0", true},
		{"v1.2.0", "v1.3.0", false},
		{"v1.2.0", "v2.0.0", true},
		{"v0.2.0", "v0.1.0", false},
	} {
		if got := mayBreak(c.base, c.next); got != c.breaks {
			t.Errorf("mayBreak(%s, %s) = %v", c.base, c.next, got)
		}
	}
	if got := nextBreaking("v0.1.3"); got != "v0.2.0" {
		t.Errorf("nextBreaking(v0.1.3) = %s", got)
	}
	if got := nextPatch("v0.1.0"); got != "v0.1.1" {
		t.Errorf("nextPatch(v0.1.0) = %s", got)
	}
}
