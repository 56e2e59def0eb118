package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Issue 28 item 5: an operator releases, through idem keys --admin, the key
// of a request idem serve (SQLite store, --lease 2s) is still proxying to an
// upstream that holds the request until it is cancelled (so the release
// always comes first, however slow the machine). The lease renewal fails,
// the upstream call is cancelled, and the client is answered 503 lease-lost (not a 502 saying the proxy
// released the key), and the log says an operator released it (not that a
// release failed).
func TestServeOperatorReleaseWhileRunning(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(testAdminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	up := newUpstream(t)
	p := startServe(t, up.srv.URL, "sqlite:"+filepath.Join(dir, "keys.db"), "--lease", "2s", "--admin-token-file", tokenFile)
	admin := func(args ...string) (string, string, bool) {
		return runIdem(t, append([]string{"keys", "--admin", p.admin, "--admin-token-file", tokenFile}, args...)...)
	}

	running := make(chan reply, 1)
	go func() { running <- post(t, p.url, "/hold", "slow-1", "x") }()
	waitFor(t, func() bool { return up.count("/hold") > 0 })
	out, stderr, ok := admin("list", "--state", "in_progress", "-o", "json")
	var v keyView
	if !ok || json.Unmarshal([]byte(out), &v) != nil || v.Token == 0 {
		t.Fatalf("keys --admin list --state in_progress: %q %q", out, stderr)
	}
	if out, stderr, ok := admin("release", v.Key, "--token", strconv.FormatUint(v.Token, 10)); !ok || !strings.Contains(out, "released "+v.Key) {
		t.Fatalf("keys --admin release: %q %q", out, stderr)
	}
	r := recv(t, running)
	var prob struct {
		Type, Detail string
		Status       int
	}
	if err := json.Unmarshal([]byte(r.body), &prob); err != nil || r.status != 503 || prob.Status != 503 ||
		!strings.HasSuffix(prob.Type, "#lease-lost") || r.header.Get("Retry-After") != "1" ||
		!strings.Contains(prob.Detail, "an operator released this key") {
		t.Fatalf("the released request's answer: %d Retry-After %q %s, want 503 lease-lost with Retry-After: 1", r.status, r.header.Get("Retry-After"), r.body)
	}
	// The settle runs after the answer is written: wait for its line.
	const released = "idemhttp: the key was released by an operator (or taken over) while in progress"
	waitFor(t, func() bool { return strings.Contains(p.out.String(), released) })
	if log := p.out.String(); strings.Contains(log, "release failed") || strings.Contains(log, "level=ERROR") {
		t.Fatalf("idem serve logged a failure for a key an operator released:\n%s", log)
	}
	// The key is free: the retry executes.
	if r := post(t, p.url, "/hold", "slow-1", "x"); r.status != 201 || r.header.Get("Idempotent-Replayed") != "" || up.count("/hold") != 2 {
		t.Fatalf("retry: %d replayed=%q executions %d, want a new execution", r.status, r.header.Get("Idempotent-Replayed"), up.count("/hold"))
	}
}
