package main

import (
	"archive/zip"
	"bytes"
	"errors"
	"fmt"
	"go/token"
	"go/types"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/exp/apidiff"
	"golang.org/x/mod/semver"
	"golang.org/x/tools/go/gcexportdata"
	"golang.org/x/tools/go/packages"
)

// apiDir holds one directory per release, api/vX.Y.Z, with the public API
// of each public module at that release: NAME.export in the format of
// golang.org/x/exp/cmd/apidiff -m -w (what apicheck compares, and what
// `go tool apidiff -m -incompatible OLD.export MODULE` reads), and NAME.txt,
// the same API as text, for review. It is under tools/release so that the
// root module's zip does not carry it.
const apiDir = "tools/release/api"

// snapshotName is the file name, without extension, of m's snapshot.
func snapshotName(m *Module) string {
	if m.Dir == "." {
		return "idem"
	}
	return strings.ReplaceAll(m.Dir, "/", "_")
}

// loadAPI type-checks the public packages of the public modules in the
// tree (in workspace mode, so siblings come from the tree).
func (r *Repo) loadAPI(fset *token.FileSet) (map[string]*apidiff.Module, error) {
	var patterns []string
	mods := map[string]*apidiff.Module{}
	for _, m := range r.Released() {
		if m.Public() {
			patterns = append(patterns, m.Path+"/...")
			mods[m.Path] = &apidiff.Module{Path: m.Path}
		}
	}
	cfg := &packages.Config{
		Dir:  r.Root,
		Fset: fset,
		Mode: packages.NeedName | packages.NeedTypes | packages.NeedModule,
	}
	pkgs, err := packages.Load(cfg, patterns...)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, p := range pkgs {
		if p.Module == nil || mods[p.Module.Path] == nil || p.Name == "main" || isInternal(p.PkgPath) {
			continue
		}
		for _, e := range p.Errors {
			errs = append(errs, e)
		}
		if len(p.Errors) == 0 {
			m := mods[p.Module.Path]
			m.Packages = append(m.Packages, p.Types)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	for path, m := range mods {
		if len(m.Packages) == 0 {
			delete(mods, path) // a module of commands alone
			continue
		}
		sort.Slice(m.Packages, func(i, j int) bool { return m.Packages[i].Path() < m.Packages[j].Path() })
	}
	return mods, nil
}

// APISnapshot writes the API of every public module to api/VERSION, the
// version in versions.txt: run it when the release is cut.
func (r *Repo) APISnapshot(w io.Writer) error {
	fset := token.NewFileSet()
	mods, err := r.loadAPI(fset)
	if err != nil {
		return err
	}
	dir := filepath.Join(r.Root, filepath.FromSlash(apiDir), r.Version)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, m := range r.Released() {
		am := mods[m.Path]
		if am == nil {
			continue
		}
		name := filepath.Join(dir, snapshotName(m))
		if err := writeExport(name+".export", fset, am); err != nil {
			return err
		}
		if err := os.WriteFile(name+".txt", apiText(am), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(w, "%s: %d packages\n", filepath.ToSlash(filepath.Join(apiDir, r.Version, snapshotName(m))), len(am.Packages))
	}
	return nil
}

// APICheck compares the tree's public API with the newest snapshot at or
// below the version in versions.txt. An incompatible change fails the check
// unless versions.txt already names a version that may break the snapshot's
// (a new major version; before v1, a new minor version).
func (r *Repo) APICheck(w io.Writer) error {
	base, err := r.newestSnapshot()
	if err != nil {
		return err
	}
	if base == "" {
		fmt.Fprintf(w, "apicheck: no snapshot in %s at or below %s: nothing to compare\n", apiDir, r.Version)
		return nil
	}
	allowed := mayBreak(base, r.Version)
	fset := token.NewFileSet()
	mods, err := r.loadAPI(fset)
	if err != nil {
		return err
	}
	snaps, err := filepath.Glob(filepath.Join(r.Root, filepath.FromSlash(apiDir), base, "*.export"))
	if err != nil {
		return err
	}
	var broken []string
	for _, snap := range snaps {
		old, err := readExport(snap, token.NewFileSet())
		if err != nil {
			return fmt.Errorf("%s: %w", snap, err)
		}
		cur := mods[old.Path]
		if cur == nil {
			broken = append(broken, fmt.Sprintf("%s: the module is gone (or has no public package left)", old.Path))
			continue
		}
		for _, c := range apidiff.ModuleChanges(old, cur).Changes {
			if !c.Compatible {
				broken = append(broken, fmt.Sprintf("%s: %s", old.Path, c.Message))
			}
		}
	}
	if len(broken) == 0 {
		fmt.Fprintf(w, "apicheck: %d modules compatible with %s\n", len(snaps), base)
		return nil
	}
	if allowed {
		fmt.Fprintf(w, "apicheck: %d incompatible changes since %s, allowed in %s:\n", len(broken), base, r.Version)
		for _, b := range broken {
			fmt.Fprintf(w, "  %s\n", b)
		}
		return nil
	}
	fmt.Fprintf(os.Stderr, "apicheck: %d incompatible changes since %s (%s):\n", len(broken), base, apiDir+"/"+base)
	for _, b := range broken {
		fmt.Fprintf(os.Stderr, "  %s\n", b)
	}
	fmt.Fprintf(os.Stderr, "Restore what is listed, or, if the break is wanted, make the next release %s: "+
		"go run ./tools/release set %s. If %s is not tagged yet, refresh its snapshot instead: "+
		"go run ./tools/release apisnapshot (docs/releasing.md).\n", nextBreaking(base), nextBreaking(base), base)
	return errCheck
}

// newestSnapshot returns the highest version directory in api/ that is not
// above the version in versions.txt, or "".
func (r *Repo) newestSnapshot() (string, error) {
	entries, err := os.ReadDir(filepath.Join(r.Root, filepath.FromSlash(apiDir)))
	if os.IsNotExist(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	best := ""
	for _, e := range entries {
		v := e.Name()
		if e.IsDir() && semver.IsValid(v) && semver.Compare(v, r.Version) <= 0 && (best == "" || semver.Compare(v, best) > 0) {
			best = v
		}
	}
	return best, nil
}

// mayBreak reports whether version next may change the API of version base
// incompatibly: a new major version, or before v1 a new minor version.
func mayBreak(base, next string) bool {
	if semver.Compare(next, base) <= 0 {
		return false
	}
	if semver.Major(base) != semver.Major(next) {
		return true
	}
	return semver.Major(base) == "v0" && semver.MajorMinor(base) != semver.MajorMinor(next)
}

// nextBreaking is the first version after base that may break its API.
func nextBreaking(base string) string {
	var major, minor int
	fmt.Sscanf(strings.TrimPrefix(base, "v"), "%d.%d", &major, &minor)
	if major == 0 {
		return fmt.Sprintf("v0.%d.0", minor+1)
	}
	return fmt.Sprintf("v%d.0.0 (with module paths ending in /v%d)", major+1, major+1)
}

// writeExport writes m as cmd/apidiff -m -w does: a zip with an entry
// "module" holding the module path and one entry PKGPATH.x of export data
// per package.
func writeExport(name string, fset *token.FileSet, m *apidiff.Module) error {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	entry, err := zw.Create("module")
	if err != nil {
		return err
	}
	if _, err := io.WriteString(entry, m.Path); err != nil {
		return err
	}
	for _, p := range m.Packages {
		entry, err := zw.Create(p.Path() + ".x")
		if err != nil {
			return err
		}
		if err := gcexportdata.Write(entry, fset, p); err != nil {
			return fmt.Errorf("export data of %s: %w", p.Path(), err)
		}
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(name, buf.Bytes(), 0o644)
}

// readExport reads a file written by writeExport (or by apidiff -m -w).
func readExport(name string, fset *token.FileSet) (*apidiff.Module, error) {
	z, err := zip.OpenReader(name)
	if err != nil {
		return nil, err
	}
	defer z.Close()
	m := &apidiff.Module{}
	for _, f := range z.File {
		rc, err := f.Open()
		if err != nil {
			return nil, err
		}
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return nil, err
		}
		if f.Name == "module" {
			m.Path = string(data)
			continue
		}
		path, ok := strings.CutSuffix(f.Name, ".x")
		if !ok {
			return nil, fmt.Errorf("unexpected entry %q", f.Name)
		}
		p, err := gcexportdata.Read(bytes.NewReader(data), fset, map[string]*types.Package{}, path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		m.Packages = append(m.Packages, p)
	}
	if m.Path == "" {
		return nil, errors.New("no module entry")
	}
	return m, nil
}

// apiText lists m's exported API one declaration a line, sorted, like the
// files in Go's own api/ directory: what a reviewer reads in a snapshot's
// diff.
func apiText(m *apidiff.Module) []byte {
	var lines []string
	for _, p := range m.Packages {
		qual := types.RelativeTo(p)
		prefix := "pkg " + p.Path() + ", "
		scope := p.Scope()
		for _, name := range scope.Names() {
			obj := scope.Lookup(name)
			if !obj.Exported() {
				continue
			}
			lines = append(lines, prefix+types.ObjectString(obj, qual))
			tn, ok := obj.(*types.TypeName)
			if !ok || tn.IsAlias() {
				continue
			}
			if _, isIface := tn.Type().Underlying().(*types.Interface); isIface {
				continue // its methods are in its type
			}
			ms := types.NewMethodSet(types.NewPointer(tn.Type()))
			for i := 0; i < ms.Len(); i++ {
				if f := ms.At(i).Obj(); f.Exported() {
					lines = append(lines, prefix+types.ObjectString(f, qual))
				}
			}
		}
	}
	sort.Strings(lines)
	return []byte(strings.Join(lines, "\n") + "\n")
}
