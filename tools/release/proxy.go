package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

// WriteProxy writes every released module at version v to dir in the
// layout of a module proxy (https://go.dev/ref/mod#goproxy-protocol), so
// that GOPROXY=file://dir serves them as a tag would: the module's files
// (those git tracks or would track, as in a clean checkout of the commit),
// with its go.mod requiring the siblings at v and no replace directive.
// The tree itself is not changed.
func (r *Repo) WriteProxy(dir string, v string) error {
	files, err := r.treeFiles()
	if err != nil {
		return err
	}
	now := time.Now().UTC().Format(time.RFC3339)
	for _, m := range r.Released() {
		gomod, err := r.withVersion(m, v)
		if err != nil {
			return err
		}
		if f, err := parseMod(m.GoMod, gomod); err != nil {
			return err
		} else if len(f.Replace) > 0 {
			return fmt.Errorf("%s: a replace directive (%s) would keep go install from accepting the module", m.GoMod, f.Replace[0].Old.Path)
		}
		esc, err := module.EscapePath(m.Path)
		if err != nil {
			return err
		}
		escV, err := module.EscapeVersion(v)
		if err != nil {
			return err
		}
		at := filepath.Join(dir, filepath.FromSlash(esc), "@v")
		if err := os.MkdirAll(at, 0o755); err != nil {
			return err
		}
		var zfiles []zip.File
		prefix := m.Dir + "/"
		for _, name := range files {
			rel := name
			if m.Dir != "." {
				if !strings.HasPrefix(name, prefix) {
					continue
				}
				rel = strings.TrimPrefix(name, prefix)
			}
			if rel == "go.mod" {
				zfiles = append(zfiles, dataFile{name: rel, data: gomod})
				continue
			}
			zfiles = append(zfiles, diskFile{name: rel, file: filepath.Join(r.Root, filepath.FromSlash(name))})
		}
		var buf bytes.Buffer
		if err := zip.Create(&buf, module.Version{Path: m.Path, Version: v}, zfiles); err != nil {
			return fmt.Errorf("zipping %s: %w", m.Path, err)
		}
		info, err := json.Marshal(struct{ Version, Time string }{v, now})
		if err != nil {
			return err
		}
		for name, data := range map[string][]byte{
			escV + ".zip":  buf.Bytes(),
			escV + ".mod":  gomod,
			escV + ".info": info,
		} {
			if err := os.WriteFile(filepath.Join(at, name), data, 0o644); err != nil {
				return err
			}
		}
		if err := addToList(filepath.Join(at, "list"), v); err != nil {
			return err
		}
	}
	return nil
}

// addToList adds v to a proxy's list file unless it is there.
func addToList(name, v string) error {
	old, err := os.ReadFile(name)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	for _, line := range strings.Fields(string(old)) {
		if line == v {
			return nil
		}
	}
	return os.WriteFile(name, append(old, v+"\n"...), 0o644)
}

// treeFiles lists the repository's files, slash-separated relative to the
// root: what git tracks plus what it would (untracked, not ignored), as a
// commit of the tree would hold them. Without git, every file.
func (r *Repo) treeFiles() ([]string, error) {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = r.Root
	out, err := cmd.Output()
	if err != nil {
		var files []string
		err := filepath.WalkDir(r.Root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == ".git" {
				return filepath.SkipDir
			}
			if d.Type().IsRegular() {
				rel, err := filepath.Rel(r.Root, p)
				if err != nil {
					return err
				}
				files = append(files, filepath.ToSlash(rel))
			}
			return nil
		})
		return files, err
	}
	var files []string
	for _, name := range strings.Split(string(out), "\x00") {
		// A file deleted in the tree but still in the index is not released.
		if name != "" && fileExists(filepath.Join(r.Root, filepath.FromSlash(name))) {
			files = append(files, path.Clean(name))
		}
	}
	return files, nil
}

type diskFile struct{ name, file string }

func (f diskFile) Path() string                 { return f.name }
func (f diskFile) Lstat() (os.FileInfo, error)  { return os.Lstat(f.file) }
func (f diskFile) Open() (io.ReadCloser, error) { return os.Open(f.file) }

type dataFile struct {
	name string
	data []byte
}

func (f dataFile) Path() string                 { return f.name }
func (f dataFile) Lstat() (os.FileInfo, error)  { return dataInfo(f), nil }
func (f dataFile) Open() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(f.data)), nil }

type dataInfo dataFile

func (fi dataInfo) Name() string       { return path.Base(fi.name) }
func (fi dataInfo) Size() int64        { return int64(len(fi.data)) }
func (fi dataInfo) Mode() fs.FileMode  { return 0o644 }
func (fi dataInfo) ModTime() time.Time { return time.Time{} }
func (fi dataInfo) IsDir() bool        { return false }
func (fi dataInfo) Sys() any           { return nil }
