package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// idem serve --store memory:PATH keeps its keys across a graceful restart:
// SIGTERM saves the snapshot, the next process loads it and replays the
// stored response without calling the upstream; a damaged snapshot is
// refused at start with an error naming it, not taken for an empty store.
func TestServeMemorySnapshot(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	path := filepath.Join(t.TempDir(), "keys.snap")
	store := "memory:" + path
	p := startServe(t, up.srv.URL, store)
	first := post(t, p.url, "/orders", "snap-1", "x")
	if first.status != 201 {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	p.terminate(t)
	p = startServe(t, up.srv.URL, store)
	again := post(t, p.url, "/orders", "snap-1", "x")
	if again.status != 201 || again.body != first.body || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("after the restart: %d %q %v, want the replay of %q", again.status, again.body, again.header, first.body)
	}
	if n := up.count("/orders"); n != 1 {
		t.Fatalf("upstream ran %d times", n)
	}
	if r := post(t, p.url, "/orders", "snap-2", "x"); r.status != 201 || r.body == first.body {
		t.Fatalf("a new key after the restart: %d %q", r.status, r.body)
	}
	p.terminate(t)

	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runServeExit(t, "--upstream", up.srv.URL, "--store", store)
	if err == nil || !strings.Contains(out, "corrupt snapshot") || !strings.Contains(out, path) {
		t.Fatalf("damaged snapshot: exit %v, output %q; want a refusal naming the file", err, out)
	}
}

// TestServeMemorySnapshotSIGKILL: idem serve --store memory:PATH killed
// with SIGKILL, so without its shutdown save, while requests keep coming and
// it saves every 100 ms. The next process must start from the last snapshot
// (a kill during a save leaves the previous file, never a damaged one), and
// every key acknowledged well before the kill (1.5 s: fifteen intervals,
// room for a loaded machine) must replay without reaching the upstream
// again. Keys of the last interval may be lost, as documented.
func TestServeMemorySnapshotSIGKILL(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	path := filepath.Join(t.TempDir(), "keys.snap")
	store := "memory:" + path
	p := startServe(t, up.srv.URL, store, "--snapshot-every", "100ms")
	type sent struct {
		key, body string
		at        time.Time
	}
	var acked []sent
	for i, end := 0, time.Now().Add(3*time.Second); time.Now().Before(end); i++ {
		k := fmt.Sprintf("kill-%d", i)
		r := post(t, p.url, "/orders", k, "x")
		if r.status != 201 {
			t.Fatalf("%s: %d %s", k, r.status, r.body)
		}
		acked = append(acked, sent{k, r.body, time.Now()})
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Wait()
	killed := time.Now()
	calls := up.count("/orders")

	p = startServe(t, up.srv.URL, store, "--snapshot-every", "100ms")
	checked := 0
	for _, s := range acked {
		if s.at.After(killed.Add(-1500 * time.Millisecond)) {
			continue // possibly after the last save
		}
		r := post(t, p.url, "/orders", s.key, "x")
		if r.status != 201 || r.body != s.body || r.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("%s, acknowledged %v before the kill: %d %q replayed=%q, want the replay of %q", s.key, killed.Sub(s.at).Round(time.Millisecond), r.status, r.body, r.header.Get("Idempotent-Replayed"), s.body)
		}
		checked++
	}
	if checked == 0 {
		t.Fatalf("no key was acknowledged 1.5 s before the kill (%d sent)", len(acked))
	}
	if n := up.count("/orders"); n != calls {
		t.Fatalf("the upstream ran %d more times for keys saved before the kill", n-calls)
	}
	t.Logf("%d keys sent, %d checked after the SIGKILL", len(acked), checked)
	if out, err := runServeExit(t, "--upstream", up.srv.URL, "--store", store, "--snapshot-every", "0s"); err == nil || !strings.Contains(out, "--snapshot-every 0s: must be positive") {
		t.Fatalf("--snapshot-every 0s: exit %v, output %q; want a refusal naming the flag", err, out)
	}
}

func TestParseMemorySnapshotSpec(t *testing.T) {
	t.Parallel()
	if got, err := parseStoreSpec("memory:/var/lib/idem/keys.snap"); err != nil || got.kind != "memory" || got.arg != "/var/lib/idem/keys.snap" {
		t.Errorf("memory:PATH = %+v, %v", got, err)
	}
	for _, bad := range []string{"memory:", "memory:a\x00b"} {
		if _, err := parseStoreSpec(bad); !errors.Is(err, errStoreSpec) {
			t.Errorf("parseStoreSpec(%q) = %v, want errStoreSpec", bad, err)
		}
	}
}
