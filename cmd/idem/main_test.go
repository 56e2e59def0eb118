package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/idem-go/idem/cmd/idem/internal/cmdlist"
	"github.com/idem-go/idem/internal/testsupport/testenv"
)

// TestMain lets a test run this binary as idem: with IDEM_TEST_LAUNCHER set
// it is the launcher, so that exec(2) replaces a child, not the test.
func TestMain(m *testing.M) {
	if os.Getenv("IDEM_TEST_LAUNCHER") == "1" {
		main()
	}
	os.Exit(m.Run())
}

func launcher(t *testing.T, env []string, args ...string) (stdout, stderr string, pid, code int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), "IDEM_TEST_LAUNCHER=1"), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return out.String(), errb.String(), cmd.Process.Pid, cmd.ProcessState.ExitCode()
}

func TestDemoRunsWithoutIdemd(t *testing.T) {
	// IDEM_IDEMD names a file that is not there: demo must not look for it.
	stdout, stderr, _, code := launcher(t, []string{"IDEM_IDEMD=/nonexistent/idemd"}, "demo")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "applied 1, duplicates 31") {
		t.Fatalf("demo output:\n%s", stdout)
	}
}

func TestDemoRefusesArguments(t *testing.T) {
	_, stderr, _, code := launcher(t, nil, "demo", "extra")
	if code != 1 || !strings.Contains(stderr, `unexpected arguments ["extra"]`) {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
}

// TestForwardExecs checks that a command runs in idemd with the same
// arguments, in the same process (its pid is the launcher's), and exits with
// idemd's code.
func TestForwardExecs(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "idemd")
	script := "#!/bin/sh\necho \"pid=$$ args=$*\"\nexit 7\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, pid, code := launcher(t, []string{"IDEM_IDEMD=" + fake}, "serve", "--ttl", "7d")
	if code != 7 {
		t.Fatalf("exit %d, want idemd's 7; stderr:\n%s", code, stderr)
	}
	want := "pid=" + strconv.Itoa(pid) + " args=serve --ttl 7d"
	if strings.TrimSpace(stdout) != want {
		t.Fatalf("idemd saw %q, want %q", stdout, want)
	}
}

func TestMissingIdemdSaysHowToInstall(t *testing.T) {
	_, stderr, _, code := launcher(t, []string{"IDEM_IDEMD=/nonexistent/idemd"}, "serve")
	if code != 1 || !strings.Contains(stderr, "IDEM_IDEMD names /nonexistent/idemd") {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
}

func TestHelpListsCommands(t *testing.T) {
	var out bytes.Buffer
	usage(&out)
	for _, c := range cmdlist.Commands {
		if !strings.Contains(out.String(), "  "+c.Name) {
			t.Errorf("help lacks %s:\n%s", c.Name, out.String())
		}
	}
}

// TestFromSource runs a command through idemd built from this tree, as
// `go run ./cmd/idem plan …` does.
func TestFromSource(t *testing.T) {
	if sourceDir() == "" {
		testenv.Cannot(t, "no source tree beside the test binary (built with -trimpath?): run go test without -trimpath")
	}
	// idemd goes to a fresh cache directory, so the build line is printed;
	// go build keeps its own cache (GOCACHE would follow XDG_CACHE_HOME).
	gocache, err := exec.Command("go", "env", "GOCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"XDG_CACHE_HOME=" + t.TempDir(), "GOCACHE=" + strings.TrimSpace(string(gocache))}
	stdout, stderr, _, code := launcher(t, env, "plan", "--rate", "100000", "--horizon", "24h")
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	if !strings.Contains(stderr, "building idemd from") || !strings.Contains(stdout, "8.64") && !strings.Contains(stdout, "8640000000") {
		t.Fatalf("stdout:\n%s\nstderr:\n%s", stdout, stderr)
	}
}
