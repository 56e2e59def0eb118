package main

import (
	"bytes"
	"encoding/json"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// idemCmd returns this test binary re-executed as the idem command; its
// chaos workers inherit the environment and are the idem command too.
func idemCmd(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	// GORACE: a race-enabled binary otherwise sleeps 1 s before exiting.
	cmd.Env = append(os.Environ(), execEnv+"=1", "GORACE=atexit_sleep_ms=0")
	return cmd
}

func TestChaosJSON(t *testing.T) {
	cmd := idemCmd("chaos", "--messages", "200", "--seed", "5", "--json", "--consumers", "2",
		"--strategies", "naive,idem-inbox,idem-sequence", "--visibility", "300ms", "--lease", "300ms")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("idem chaos: %v\n%s\n%s", err, out, stderr.String())
	}
	var rep struct {
		Seed       uint64 `json:"seed"`
		Strategies []struct {
			Name      string `json:"name"`
			Delivered int    `json:"delivered"`
			Applied   int    `json:"applied"`
			Lost      int    `json:"lost"`
			Doubled   int    `json:"doubled"`
		} `json:"strategies"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("output is not the JSON report: %v\n%s", err, out)
	}
	if rep.Seed != 5 || len(rep.Strategies) != 3 {
		t.Fatalf("report: %s", out)
	}
	for _, s := range rep.Strategies {
		idem := strings.HasPrefix(s.Name, "idem")
		if idem && (s.Lost != 0 || s.Doubled != 0 || s.Applied != 200) {
			t.Errorf("%s: applied %d, lost %d, doubled %d", s.Name, s.Applied, s.Lost, s.Doubled)
		}
		if !idem && s.Doubled == 0 {
			t.Errorf("%s doubled nothing: %s", s.Name, out)
		}
		if s.Delivered < 200 {
			t.Errorf("%s: %d deliveries", s.Name, s.Delivered)
		}
	}
}

func TestChaosTable(t *testing.T) {
	cmd := idemCmd("chaos", "--messages", "100", "--seed", "3", "--consumers", "2", "--strategies", "naive-cte,idem-inbox-batch",
		"--visibility", "300ms")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("idem chaos: %v\n%s", err, out)
	}
	for _, want := range []string{"100 messages, seed 3, sqlite", "idem-inbox-batch", "exactly once", "DOUBLED"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "\r") {
		t.Errorf("progress bar drawn on a pipe:\n%q", out)
	}
}

func TestChaosBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--dup-rate", "2"},
		{"--backend", "postgres"},
		{"--backend", "oracle"},
		{"--keystore", "memory"},
		{"--keystore", "ftp://x"},
		{"--strategies", "naive,magic"},
		{"--consumers", "0"},
	} {
		out, err := run(t, append([]string{"chaos"}, args...)...)
		if err == nil || !strings.Contains(err.Error(), "chaos") {
			t.Errorf("chaos %v: err = %v\n%s", args, err, out)
		}
	}
}

// TestChaosWorkersDieWithHarness kills the harness itself and checks that
// the kernel takes its worker processes with it (Pdeathsig).
func TestChaosWorkersDieWithHarness(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		if testenv.InCI() {
			t.Fatal("CI=true: no /proc; Pdeathsig is Linux-only and CI runs on Linux")
		}
		t.Skip("no /proc (not Linux; under CI=true this fails instead): Pdeathsig cannot be checked")
	}
	// --dsn: a killed harness cannot remove its database directory.
	cmd := idemCmd("chaos", "--messages", "1000000", "--strategies", "naive", "--consumers", "2", "--dsn", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var workers []int
	deadline := time.Now().Add(30 * time.Second)
	for len(workers) < 2 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		workers = childrenOf(cmd.Process.Pid)
	}
	if len(workers) < 2 {
		t.Fatalf("harness started %d workers", len(workers))
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	deadline = time.Now().Add(10 * time.Second)
	for _, pid := range workers {
		for alive(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("worker %d outlived its harness", pid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _ := procStat(child); ppid == pid {
			out = append(out, child)
		}
	}
	return out
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	_, state := procStat(pid)
	return state != "" && state != "Z" && state != "X"
}

// procStat returns a process's parent and state from /proc/PID/stat.
func procStat(pid int) (ppid int, state string) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, ""
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 2 {
		return 0, ""
	}
	ppid, _ = strconv.Atoi(f[1])
	return ppid, f[0]
}
