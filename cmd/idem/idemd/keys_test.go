package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/keystore"
)

// runIdem runs the idem command (this test binary, re-executed) and
// returns its stdout, stderr and whether it exited 0.
func runIdem(t *testing.T, args ...string) (stdout, stderr string, ok bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), execEnv+"=1")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("idem %v: %v", args, err)
	}
	return out.String(), errOut.String(), err == nil
}

// keyStores are the store URLs idem keys is tested on.
func keyStores(t *testing.T) map[string]func(t *testing.T) string {
	return map[string]func(t *testing.T) string{
		"sqlite":   func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "keys.db") },
		"postgres": func(t *testing.T) string { return testenv.PostgresURL(t) },
		"redis":    func(t *testing.T) string { return "redis://" + testenv.RedisAddr(t) + "/9" },
	}
}

// TestKeysCommand runs idem keys as a process against each store: list
// by state, show (with an HTTP key's stored status), release refused for
// a stale token and changing nothing, release with the holder's token
// freeing the key, and forget.
func TestKeysCommand(t *testing.T) {
	t.Parallel()
	for name, url := range keyStores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testKeysCommand(t, url(t))
		})
	}
}

func testKeysCommand(t *testing.T, storeURL string) {
	ctx := context.Background()
	spec, err := parseStoreSpec(storeURL)
	if err != nil {
		t.Fatal(err)
	}
	opened, err := openStore(ctx, spec, keystore.DefaultMaxResultSize)
	if err != nil {
		t.Fatal(err)
	}
	defer opened.close()
	scope := testenv.Name("keys")
	s, err := keystore.Scope(opened.Store, scope)
	if err != nil {
		t.Fatal(err)
	}
	idem := func(args ...string) (string, string, bool) {
		return runIdem(t, append([]string{"keys", "--store", storeURL, "--scope", scope}, args...)...)
	}
	in, ok := keystore.As[keystore.Inspector](s)
	if !ok {
		t.Fatalf("%T does not implement keystore.Inspector: every store idem serve opens must", s)
	}

	reserve := func(key string, fp []byte) keystore.Claim {
		t.Helper()
		c, err := s.Reserve(ctx, key, fp, 10*time.Minute)
		if err != nil || c.State != keystore.Acquired {
			t.Fatalf("Reserve(%q): %v %v", key, c.State, err)
		}
		return c
	}
	held := reserve("held", []byte{1, 2})
	old := reserve("stuck", nil)
	if err := s.Release(ctx, old); err != nil {
		t.Fatal(err)
	}
	stuck := reserve("stuck", nil)
	// A done key as idem serve writes it.
	m, err := idemhttp.New(s)
	if err != nil {
		t.Fatal(err)
	}
	storeDone(t, m, "/orders", `"order-1"`, "Authorization", "Bearer alice")

	list := func(args ...string) map[string]keyView {
		t.Helper()
		out, stderr, ok := idem(append([]string{"list", "-o", "json"}, args...)...)
		if !ok {
			t.Fatalf("keys list %v: %s", args, stderr)
		}
		got := map[string]keyView{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if line == "" {
				continue
			}
			var v keyView
			if err := json.Unmarshal([]byte(line), &v); err != nil {
				t.Fatalf("keys list output %q: %v", line, err)
			}
			got[v.Key] = v
		}
		return got
	}
	leases := list("--state", "in_progress")
	if len(leases) != 2 || leases["held"].Token != held.Token || leases["stuck"].Token != stuck.Token || leases["held"].Fingerprint != "0102" {
		t.Fatalf("list --state in_progress: %+v, want held (token %d, fingerprint 0102) and stuck (token %d)", leases, held.Token, stuck.Token)
	}
	done := list("--state", "done")
	if len(done) != 1 {
		t.Fatalf("list --state done: %+v, want the HTTP key", done)
	}
	var httpKey string
	for k := range done {
		httpKey = k
	}
	out, stderr, ok := idem("show", httpKey, "-o", "json")
	var v keyView
	if !ok || json.Unmarshal([]byte(out), &v) != nil || v.State != "done" || v.HTTP == nil || v.HTTP.Status != http.StatusCreated {
		t.Fatalf("show %s: %q %q, want done with HTTP status 201", httpKey, out, stderr)
	}
	if out, _, ok := idem("show", httpKey); !ok || !strings.Contains(out, "http status:  201") {
		t.Fatalf("show (text): %q", out)
	}
	// The same key named by the client's request.
	out, stderr, ok = idem("show", "--idempotency-key", `"order-1"`, "-H", "Authorization: Bearer alice", "-o", "json")
	if !ok || json.Unmarshal([]byte(out), &v) != nil || v.Key != httpKey {
		t.Fatalf("show --idempotency-key: %q %q, want %s", out, stderr, httpKey)
	}
	if _, stderr, _ := idem("list", "--limit", "1", "-o", "json"); !strings.Contains(stderr, "more: --after ") {
		t.Fatalf("list --limit 1 of 3 keys printed no cursor: %q", stderr)
	}

	// A stale token is refused and changes nothing.
	_, stderr, ok = idem("release", "stuck", "--token", strconv.FormatUint(old.Token, 10))
	if ok || !strings.Contains(stderr, "refused") || !strings.Contains(stderr, "nothing was changed") {
		t.Fatalf("release with a stale token: ok %v, stderr %q; want a refusal", ok, stderr)
	}
	if k, err := in.Inspect(ctx, "stuck"); err != nil || k.State != keystore.InProgress || k.Token != stuck.Token {
		t.Fatalf("after the refused release: %+v %v, want the lease of token %d untouched", k, err, stuck.Token)
	}
	// The holder's token frees the key.
	if out, stderr, ok := idem("release", "stuck", "--token", strconv.FormatUint(stuck.Token, 10)); !ok || !strings.Contains(out, "released") {
		t.Fatalf("release with the holder's token: %q %q", out, stderr)
	}
	if _, err := in.Inspect(ctx, "stuck"); !errors.Is(err, keystore.ErrNotFound) {
		t.Fatalf("after release: %v, want not found", err)
	}
	if c, err := s.Reserve(ctx, "stuck", nil, time.Minute); err != nil || c.State != keystore.Acquired {
		t.Fatalf("Reserve after the operator's release: %v %v", c.State, err)
	}
	// Forget: only done keys.
	if _, stderr, ok := idem("forget", "held"); ok || !strings.Contains(stderr, "in progress") {
		t.Fatalf("forget of an in-progress key: ok %v %q", ok, stderr)
	}
	if out, stderr, ok := idem("forget", httpKey); !ok || !strings.Contains(out, "forgot") {
		t.Fatalf("forget: %q %q", out, stderr)
	}
	if _, err := in.Inspect(ctx, httpKey); !errors.Is(err, keystore.ErrNotFound) {
		t.Fatalf("after forget: %v, want not found", err)
	}
}
