package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/semver"
)

// versionsFile is the one place the release version is written; every
// go.mod's requirement of a sibling module must agree with it.
const versionsFile = "versions.txt"

// Module is one module of the workspace.
type Module struct {
	Dir      string // relative to the repository root, slash-separated; "." for the root
	Path     string // module path
	Released bool   // tagged at the release version (not listed as unreleased)

	GoMod string // file name of its go.mod
	File  *modfile.File
}

// Public reports whether users import the module's packages: a released
// module outside internal/ (cmd/idem is released but has only a main
// package; the caller filters packages by name).
func (m *Module) Public() bool {
	return m.Released && !isInternal(m.Path)
}

// Tag is the git tag that releases m at version v: the Go convention is the
// module's directory as a prefix (franz-go's pkg/kadm/v1.20.0).
func (m *Module) Tag(v string) string {
	if m.Dir == "." {
		return v
	}
	return m.Dir + "/" + v
}

// Repo is the workspace: the modules go.work lists and versions.txt.
type Repo struct {
	Root       string
	Version    string          // the version recorded in versions.txt
	Unreleased map[string]bool // module dirs never tagged
	Modules    []*Module       // sorted by Dir, the root first
}

// findRoot walks up from dir to the directory that holds go.work and
// versions.txt.
func findRoot(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		if fileExists(filepath.Join(dir, "go.work")) && fileExists(filepath.Join(dir, versionsFile)) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no directory above the current one holds go.work and %s", versionsFile)
		}
		dir = parent
	}
}

func fileExists(name string) bool {
	_, err := os.Stat(name)
	return err == nil
}

// readWork parses root's go.work.
func readWork(root string) (*modfile.WorkFile, error) {
	name := filepath.Join(root, "go.work")
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	return modfile.ParseWork(name, data, nil)
}

// loadRepo reads go.work, versions.txt and every listed go.mod under root.
func loadRepo(root string) (*Repo, error) {
	r := &Repo{Root: root, Unreleased: map[string]bool{}}
	if err := r.readVersions(); err != nil {
		return nil, err
	}
	work, err := readWork(root)
	if err != nil {
		return nil, err
	}
	for _, u := range work.Use {
		dir := filepath.ToSlash(filepath.Clean(u.Path))
		name := filepath.Join(root, filepath.FromSlash(dir), "go.mod")
		data, err := os.ReadFile(name)
		if err != nil {
			return nil, err
		}
		f, err := parseMod(name, data)
		if err != nil {
			return nil, err
		}
		if f.Module == nil {
			return nil, fmt.Errorf("%s: no module statement", name)
		}
		r.Modules = append(r.Modules, &Module{
			Dir:      dir,
			Path:     f.Module.Mod.Path,
			Released: !r.Unreleased[dir],
			GoMod:    name,
			File:     f,
		})
	}
	sort.Slice(r.Modules, func(i, j int) bool {
		a, b := r.Modules[i].Dir, r.Modules[j].Dir
		if a == "." || b == "." {
			return a == "." && b != "."
		}
		return a < b
	})
	for dir := range r.Unreleased {
		if r.byDir(dir) == nil {
			return nil, fmt.Errorf("%s: unreleased %s is not a module in go.work", versionsFile, dir)
		}
	}
	return r, nil
}

// readVersions parses versions.txt: "version vX.Y.Z" once, and
// "unreleased <dir>" for each go.work module that is never tagged. Blank
// lines and lines starting with # are ignored.
func (r *Repo) readVersions() error {
	name := filepath.Join(r.Root, versionsFile)
	data, err := os.ReadFile(name)
	if err != nil {
		return err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "version":
			if r.Version != "" {
				return fmt.Errorf("%s:%d: a second version line", name, n)
			}
			if err := checkVersion(f[1]); err != nil {
				return fmt.Errorf("%s:%d: %w", name, n, err)
			}
			r.Version = f[1]
		case len(f) == 2 && f[0] == "unreleased":
			r.Unreleased[filepath.ToSlash(filepath.Clean(f[1]))] = true
		default:
			return fmt.Errorf("%s:%d: want \"version vX.Y.Z\" or \"unreleased <dir>\", have %q", name, n, line)
		}
	}
	if r.Version == "" {
		return fmt.Errorf("%s: no version line", name)
	}
	return sc.Err()
}

// writeVersion rewrites the version line of versions.txt, keeping the rest.
func (r *Repo) writeVersion(v string) error {
	name := filepath.Join(r.Root, versionsFile)
	data, err := os.ReadFile(name)
	if err != nil {
		return err
	}
	lines := strings.SplitAfter(string(data), "\n")
	for i, line := range lines {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "version" {
			lines[i] = "version " + v + "\n"
		}
	}
	r.Version = v
	return os.WriteFile(name, []byte(strings.Join(lines, "")), 0o644)
}

// checkVersion accepts a canonical semantic version below v2: from v2 on,
// every module path would need a /v2 suffix, which set does not rewrite.
func checkVersion(v string) error {
	if !semver.IsValid(v) || semver.Canonical(v) != v {
		return fmt.Errorf("%q is not a canonical semantic version such as v0.2.0", v)
	}
	if m := semver.Major(v); m != "v0" && m != "v1" {
		return fmt.Errorf("%s: a major version above v1 needs module paths ending in /%s (https://go.dev/blog/v2-go-modules); change them first", v, m)
	}
	return nil
}

func (r *Repo) byDir(dir string) *Module {
	for _, m := range r.Modules {
		if m.Dir == dir {
			return m
		}
	}
	return nil
}

func (r *Repo) byPath(path string) *Module {
	for _, m := range r.Modules {
		if m.Path == path {
			return m
		}
	}
	return nil
}

// Released lists the modules tagged at each release, the root first.
func (r *Repo) Released() []*Module {
	var out []*Module
	for _, m := range r.Modules {
		if m.Released {
			out = append(out, m)
		}
	}
	return out
}

// isInternal reports whether an import path has an internal element.
func isInternal(path string) bool {
	for _, e := range strings.Split(path, "/") {
		if e == "internal" {
			return true
		}
	}
	return false
}

// withVersion returns m's go.mod with every requirement of a sibling module
// at v and the replace directives of sibling modules dropped (go.work
// resolves siblings in the repository; a user never sees a replace).
func (r *Repo) withVersion(m *Module, v string) ([]byte, error) {
	// Parse again: the caller may keep using m.File as read.
	data, err := os.ReadFile(m.GoMod)
	if err != nil {
		return nil, err
	}
	f, err := parseMod(m.GoMod, data)
	if err != nil {
		return nil, err
	}
	for _, req := range f.Require {
		if r.byPath(req.Mod.Path) != nil && req.Mod.Version != v {
			if err := f.AddRequire(req.Mod.Path, v); err != nil {
				return nil, err
			}
		}
	}
	for _, rep := range f.Replace {
		if r.byPath(rep.Old.Path) != nil && modfile.IsDirectoryPath(rep.New.Path) {
			if err := f.DropReplace(rep.Old.Path, rep.Old.Version); err != nil {
				return nil, err
			}
		}
	}
	f.Cleanup()
	return f.Format()
}

func parseMod(name string, data []byte) (*modfile.File, error) {
	return modfile.Parse(name, data, nil)
}

// problems lists what check fails on: a sibling required at a version other
// than r.Version, any replace directive in a released module (go install
// refuses a module that has one, and a dependency's are ignored), a
// released module requiring an unreleased one.
func (r *Repo) problems() []string {
	var out []string
	for _, m := range r.Modules {
		rel := filepath.ToSlash(filepath.Join(m.Dir, "go.mod"))
		for _, req := range m.File.Require {
			sib := r.byPath(req.Mod.Path)
			if sib == nil {
				continue
			}
			if req.Mod.Version != r.Version {
				out = append(out, fmt.Sprintf("%s requires %s %s, not %s (%s): run go run ./tools/release set %s",
					rel, req.Mod.Path, req.Mod.Version, r.Version, versionsFile, r.Version))
			}
			if m.Released && !sib.Released {
				out = append(out, fmt.Sprintf("%s is released but requires %s, which %s lists as unreleased: a user could not resolve it",
					rel, req.Mod.Path, versionsFile))
			}
		}
		for _, rep := range m.File.Replace {
			out = append(out, fmt.Sprintf("%s:%d: replace %s: remove it (go.work resolves siblings in the repository; a dependency's replace is ignored, and go install refuses a module that has one)",
				rel, rep.Syntax.Start.Line, rep.Old.Path))
		}
	}
	if work, err := r.workReplaces(r.Version); err != nil {
		out = append(out, err.Error())
	} else if old, err := os.ReadFile(filepath.Join(r.Root, "go.work")); err != nil {
		out = append(out, err.Error())
	} else if string(old) != string(work) {
		out = append(out, fmt.Sprintf("go.work: the replace directives that resolve siblings at %s to the tree are missing or stale: run go run ./tools/release set %s", r.Version, r.Version))
	}
	return out
}

var errCheck = errors.New("check failed")

// workReplaces returns go.work rewritten so that each sibling module some
// go.mod requires resolves, at version v, to its directory in the tree. A
// workspace still reads the go.mod of every required version of a
// workspace module, so without these the tree would not build before v is
// tagged and on a proxy; they are in go.work alone, which users never see.
func (r *Repo) workReplaces(v string) ([]byte, error) {
	wf, err := readWork(r.Root)
	if err != nil {
		return nil, err
	}
	want := map[string]string{} // module path -> ./dir
	for _, m := range r.Modules {
		for _, req := range m.File.Require {
			if sib := r.byPath(req.Mod.Path); sib != nil {
				want[sib.Path] = "./" + strings.TrimPrefix(sib.Dir, ".")
			}
		}
	}
	for _, rep := range append([]*modfile.Replace(nil), wf.Replace...) {
		if r.byPath(rep.Old.Path) == nil {
			continue
		}
		if dir, ok := want[rep.Old.Path]; ok && rep.Old.Version != "" && rep.New.Path == dir && rep.New.Version == "" {
			// Rewrite the version in place, keeping the block and its comment.
			for i, tok := range rep.Syntax.Token {
				if tok == rep.Old.Version && i > 0 && rep.Syntax.Token[i-1] == rep.Old.Path {
					rep.Syntax.Token[i] = v
				}
			}
			rep.Old.Version = v
			delete(want, rep.Old.Path)
			continue
		}
		if err := wf.DropReplace(rep.Old.Path, rep.Old.Version); err != nil {
			return nil, err
		}
	}
	paths := make([]string, 0, len(want))
	for p := range want {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		if err := wf.AddReplace(p, v, want[p], ""); err != nil {
			return nil, err
		}
	}
	wf.Cleanup()
	wf.SortBlocks()
	return modfile.Format(wf.Syntax), nil
}
