package main

import (
	"bytes"
	"debug/buildinfo"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
)

// idemdPath is idemd's package path: `go install idemdPath@VERSION`.
const idemdPath = "github.com/idem-go/idem/cmd/idem/idemd"

type errArgs []string

func (e errArgs) Error() string {
	return fmt.Sprintf("unexpected arguments %q", []string(e))
}

// version is idem's module version: "(devel)" when built from a source tree.
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

func exeName(name string) string {
	if runtime.GOOS == "windows" {
		return name + ".exe"
	}
	return name
}

// findIdemd returns the idemd executable that runs idem's commands, or an
// error that says how to install it. Building it from source (the first
// command but demo after go run ./cmd/idem) prints one line to progress.
func findIdemd(progress io.Writer) (string, error) {
	if p := os.Getenv("IDEM_IDEMD"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("IDEM_IDEMD names %s: %w", p, err)
		}
		return p, nil
	}
	v := version()
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), exeName("idemd"))
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if v == "(devel)" {
		if dir := sourceDir(); dir != "" {
			return buildIdemd(dir, progress)
		}
	}
	p, err := exec.LookPath("idemd")
	if err != nil {
		return "", fmt.Errorf("this command runs in idemd, which is not installed: go install %s@%s (or go install github.com/idem-go/idem/cmd/idem/...@%[2]s for both binaries)", idemdPath, installVersion(v))
	}
	bi, err := buildinfo.ReadFile(p)
	if err != nil {
		return "", fmt.Errorf("%s: not an idemd binary: %w", p, err)
	}
	if bi.Main.Version != v {
		return "", fmt.Errorf("%s is version %s but idem is %s: go install %s@%s", p, bi.Main.Version, v, idemdPath, installVersion(v))
	}
	return p, nil
}

func installVersion(v string) string {
	if v == "(devel)" {
		return "latest"
	}
	return v
}

// sourceDir returns idemd's source directory when idem runs from a source
// tree (go run ./cmd/idem), found beside this file's compile-time path, or
// "" when the tree is not there (a binary moved to another machine, or built
// with -trimpath).
func sourceDir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok || !filepath.IsAbs(file) {
		return ""
	}
	dir := filepath.Join(filepath.Dir(file), "idemd")
	if _, err := os.Stat(filepath.Join(dir, "main.go")); err != nil {
		return ""
	}
	return dir
}

// buildIdemd builds idemd from the source tree in dir into the user's cache
// directory (go build reuses its cache, so a rebuild after the first is a
// link) and returns its path.
func buildIdemd(dir string, progress io.Writer) (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	out := filepath.Join(cache, "idem", exeName("idemd-dev"))
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", err
	}
	fmt.Fprintf(progress, "idem: building idemd from %s (the commands but demo run there)\n", dir)
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Run(); err != nil {
		var ee *exec.Error
		if errors.As(err, &ee) {
			return "", fmt.Errorf("building idemd from source needs the go command: %w", err)
		}
		return "", fmt.Errorf("go build %s: %w\n%s", dir, err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
