package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
