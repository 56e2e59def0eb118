package main

import (
	"bytes"
	"debug/buildinfo"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
)

// TestInstallFromProxy meets idem the way a user does: every released
// module, zipped from the tree at a version no proxy or module cache has
// seen, served from a file-system module proxy; outside the workspace, a
// program that imports every public package is tidied, built and run, and
// `go install github.com/idem-go/idem/cmd/idem/...@VERSION` builds the CLI
// (the idem launcher and idemd, which it runs). It
// fails if a go.mod requires a version that does not exist, needs a
// replace, or a public package does not build as a dependency.
//
// Third-party modules come from the machine's module cache and proxy, and
// builds reuse its build cache; the idem entries of the test version are
// removed from the module cache afterwards. `make install-test` runs it
// alone.
func TestInstallFromProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every module as a dependency, about two minutes: skipped in -short mode")
	}
	start := time.Now()
	root, err := findRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	repo, err := loadRepo(root)
	if err != nil {
		t.Fatal(err)
	}
	goCmd := goTool()
	// A version nothing else can satisfy: the next patch of the recorded
	// version, as a pre-release unique to this run.
	v := nextPatch(repo.Version) + fmt.Sprintf("-installtest.%d", time.Now().UnixNano())
	modcache := strings.TrimSpace(runCmd(t, root, nil, goCmd, "env", "GOMODCACHE"))
	t.Cleanup(func() { cleanModCache(t, modcache, repo.Released(), v) })

	proxy := t.TempDir()
	if err := repo.WriteProxy(proxy, v); err != nil {
		t.Fatal(err)
	}
	t.Logf("proxy of %d modules at %s written in %v", len(repo.Released()), v, time.Since(start).Round(time.Millisecond))

	pkgs, mods := publicPackages(t, repo, goCmd)
	user := t.TempDir()
	var gomod, main strings.Builder
	fmt.Fprintf(&gomod, "module example.com/idemuser\n\ngo 1.26.0\n\nrequire (\n")
	for _, m := range mods {
		fmt.Fprintf(&gomod, "\t%s %s\n", m, v)
	}
	fmt.Fprintf(&gomod, ")\n")
	fmt.Fprintf(&main, "// Command idemuser imports every public package of idem.\npackage main\n\nimport (\n\t\"fmt\"\n\n")
	for _, p := range pkgs {
		fmt.Fprintf(&main, "\t_ %q\n", p)
	}
	fmt.Fprintf(&main, ")\n\nfunc main() { fmt.Println(\"idemuser: ok\") }\n")
	for name, data := range map[string]string{"go.mod": gomod.String(), "main.go": main.String()} {
		if err := os.WriteFile(filepath.Join(user, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	gobin := t.TempDir()
	goproxy := strings.TrimSpace(runCmd(t, root, nil, goCmd, "env", "GOPROXY"))
	env := []string{
		"GOWORK=off",
		"GOTOOLCHAIN=local",
		"GOPROXY=file://" + filepath.ToSlash(proxy) + "," + goproxy,
		"GONOSUMDB=github.com/idem-go",
		"GONOPROXY=",
		"GOPRIVATE=",
		"GOBIN=" + gobin,
	}

	step := time.Now()
	runCmd(t, user, env, goCmd, "mod", "tidy")
	tidied, err := os.ReadFile(filepath.Join(user, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := parseMod("go.mod", tidied)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Replace) > 0 {
		t.Errorf("go mod tidy left a replace directive:\n%s", tidied)
	}
	// Each idem module resolves to the proxy's version, from the module
	// cache, not to the tree.
	for _, line := range strings.Split(strings.TrimSpace(runCmd(t, user, env, goCmd, "list", "-m", "-f", "{{.Path}} {{.Version}} {{.Dir}} {{.Replace}}", "all")), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 || repo.byPath(fields[0]) == nil {
			continue
		}
		if fields[1] != v || len(fields) != 4 || !strings.HasPrefix(fields[2], modcache) || fields[3] != "<nil>" {
			t.Errorf("the user module resolves %s, want %s from the module cache", line, v)
		}
	}
	t.Logf("go mod tidy with %d modules, %d packages: %v", len(mods), len(pkgs), time.Since(step).Round(time.Millisecond))

	step = time.Now()
	exe := filepath.Join(t.TempDir(), "idemuser")
	runCmd(t, user, env, goCmd, "build", "-o", exe, ".")
	if out := runCmd(t, user, nil, exe); !strings.Contains(out, "idemuser: ok") {
		t.Errorf("idemuser printed %q", out)
	}
	t.Logf("go build of the program importing every public package: %v", time.Since(step).Round(time.Millisecond))

	step = time.Now()
	// The launcher alone first: a command that runs in idemd says how to
	// install it, at the launcher's own version.
	runCmd(t, user, env, goCmd, "install", "github.com/idem-go/idem/cmd/idem@"+v)
	idem := filepath.Join(gobin, "idem"+exeSuffix())
	if out, err := exec.Command(idem, "plan", "--rate", "1000", "--horizon", "1h").CombinedOutput(); err == nil ||
		!strings.Contains(string(out), "go install github.com/idem-go/idem/cmd/idem/idemd@"+v) {
		t.Errorf("idem plan without idemd: %v\n%s", err, out)
	}
	runCmd(t, user, env, goCmd, "install", "github.com/idem-go/idem/cmd/idem/...@"+v)
	help := runCmd(t, user, nil, idem, "--help")
	if !strings.Contains(help, "Usage:") || !strings.Contains(help, "serve") {
		t.Errorf("idem --help printed:\n%s", help)
	}
	// idem hands plan to the idemd beside it.
	if out := runCmd(t, user, nil, idem, "plan", "--rate", "1000", "--horizon", "1h"); !strings.Contains(out, "keys retained") {
		t.Errorf("idem plan printed:\n%s", out)
	}
	if out := runCmd(t, user, nil, idem, "version"); strings.TrimSpace(out) != "idem "+v {
		t.Errorf("idem version printed %q, want idem %s", out, v)
	}
	for _, bin := range []struct{ name, pkg string }{
		{"idem", "github.com/idem-go/idem/cmd/idem"},
		{"idemd", "github.com/idem-go/idem/cmd/idem/idemd"},
	} {
		info, err := buildinfo.ReadFile(filepath.Join(gobin, bin.name+exeSuffix()))
		if err != nil {
			t.Fatal(err)
		}
		if info.Path != bin.pkg || info.Main.Version != v {
			t.Errorf("the installed %s is %s %s, want %s %s", bin.name, info.Path, info.Main.Version, bin.pkg, v)
		}
		for _, d := range info.Deps {
			if repo.byPath(d.Path) != nil && (d.Version != v || d.Replace != nil) {
				t.Errorf("the installed %s has %s %s (replace %v), want %s", bin.name, d.Path, d.Version, d.Replace, v)
			}
		}
	}
	t.Logf("go install github.com/idem-go/idem/cmd/idem/...@%s: %v; whole test %v", v, time.Since(step).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

// publicPackages lists the importable packages of the public modules (not
// internal, not main) and the modules that hold them, sorted.
func publicPackages(t *testing.T, repo *Repo, goCmd string) (pkgs, mods []string) {
	var patterns []string
	for _, m := range repo.Released() {
		if m.Public() {
			patterns = append(patterns, m.Path+"/...")
		}
	}
	args := append([]string{"list", "-e", "-f", "{{.Module.Path}} {{.ImportPath}} {{.Name}} {{len .GoFiles}}"}, patterns...)
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(runCmd(t, repo.Root, nil, goCmd, args...)), "\n") {
		f := strings.Fields(line)
		if len(f) != 4 {
			t.Fatalf("go list: unexpected line %q", line)
		}
		m := repo.byPath(f[0])
		if m == nil || !m.Public() || isInternal(f[1]) || f[2] == "main" || f[3] == "0" {
			continue
		}
		pkgs = append(pkgs, f[1])
		if !seen[m.Path] {
			seen[m.Path] = true
			mods = append(mods, m.Path)
		}
	}
	sort.Strings(pkgs)
	sort.Strings(mods)
	if len(pkgs) == 0 {
		t.Fatal("no public package found")
	}
	return pkgs, mods
}

// nextPatch returns v with its patch number raised by one: v0.1.0 -> v0.1.1.
func nextPatch(v string) string {
	var major, minor, patch int
	fmt.Sscanf(strings.TrimPrefix(semver.Canonical(v), "v"), "%d.%d.%d", &major, &minor, &patch)
	return fmt.Sprintf("v%d.%d.%d", major, minor, patch+1)
}

// cleanModCache removes version v of each module from the module cache
// (its extracted tree, read-only, and its download files), and v from the
// cached version lists, so that the test leaves nothing behind.
func cleanModCache(t *testing.T, modcache string, mods []*Module, v string) {
	escV, err := module.EscapeVersion(v)
	if err != nil {
		t.Error(err)
		return
	}
	for _, m := range mods {
		esc, err := module.EscapePath(m.Path)
		if err != nil {
			t.Error(err)
			continue
		}
		tree := filepath.Join(modcache, filepath.FromSlash(esc)+"@"+escV)
		filepath.Walk(tree, func(p string, info os.FileInfo, err error) error {
			if err == nil && info.IsDir() {
				os.Chmod(p, 0o755)
			}
			return nil
		})
		if err := os.RemoveAll(tree); err != nil {
			t.Errorf("cleaning the module cache: %v", err)
		}
		at := filepath.Join(modcache, "cache", "download", filepath.FromSlash(esc), "@v")
		files, _ := filepath.Glob(filepath.Join(at, escV+".*"))
		for _, f := range files {
			if err := os.Remove(f); err != nil {
				t.Errorf("cleaning the module cache: %v", err)
			}
		}
		list := filepath.Join(at, "list")
		if data, err := os.ReadFile(list); err == nil {
			var keep []byte
			for _, line := range strings.SplitAfter(string(data), "\n") {
				if strings.TrimSpace(line) != v {
					keep = append(keep, line...)
				}
			}
			if len(keep) == 0 {
				os.Remove(list)
			} else {
				os.WriteFile(list, keep, 0o644)
			}
		}
	}
	// Then the directories left empty, deepest first (os.Remove keeps a
	// directory that still holds another version).
	for _, top := range []string{
		filepath.Join(modcache, "github.com", "idem-go"),
		filepath.Join(modcache, "cache", "download", "github.com", "idem-go"),
	} {
		var dirs []string
		filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			os.Remove(dirs[i])
		}
	}
}

// runCmd runs a command in dir with env added to the test's environment and
// returns its standard output; it fails the test on error.
func runCmd(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s (in %s): %v\n%s%s", name, strings.Join(args, " "), dir, err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// goTool is the go command on $PATH, which runs the test: go test puts
// its own toolchain's bin directory first.
func goTool() string {
	return "go"
}

func exeSuffix() string {
	if runtime.GOOS == "windows" {
		return ".exe"
	}
	return ""
}
