package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/sqlitestore"
)

// idem serve reports each route in idem_http_requests_total's route label:
// the --config pattern that served the request, or "default".
func TestServeMetricsPerRoute(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	p, _ := startWithConfig(t, up, "routes:\n  - pattern: POST /orders\n")
	for _, path := range []string{"/orders", "/other"} {
		if r := post(t, p.url, path, "k"+path[1:], "x"); r.status != 201 {
			t.Fatalf("POST %s: %d %s", path, r.status, r.body)
		}
	}
	res, err := client.Get(p.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	m, _ := io.ReadAll(res.Body)
	for _, want := range []string{
		`idem_http_requests_total{outcome="executed",route="POST /orders"} 1`,
		`idem_http_requests_total{outcome="executed",route="default"} 1`,
	} {
		if !bytes.Contains(m, []byte(want)) {
			t.Errorf("metrics lack %s:\n%s", want, grepLines(string(m), "idem_http_requests_total"))
		}
	}
}

func grepLines(s, prefix string) string {
	var out []string
	for l := range strings.Lines(s) {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "")
}

// --handler-timeout bounds the upstream call: 504, the key released, and
// the retry executes. A negative one is refused; days are allowed.
func TestServeHandlerTimeout(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	p := startServe(t, up.srv.URL, "memory", "--handler-timeout", "300ms")
	start := time.Now()
	r := post(t, p.url, "/very-slow", "k", "x") // 3 s the first time
	if r.status != 504 || !strings.Contains(r.body, "#upstream-unreachable") {
		t.Fatalf("a call past --handler-timeout: %d %s, want 504 upstream-unreachable", r.status, r.body)
	}
	if took := time.Since(start); took > 2500*time.Millisecond {
		t.Fatalf("the 504 took %v, want about --handler-timeout (300ms)", took)
	}
	if r := post(t, p.url, "/very-slow", "k", "x"); r.status != 201 || r.header.Get("Idempotent-Replayed") != "" || up.count("/very-slow") != 2 {
		t.Fatalf("retry: %d replayed=%q executions %d, want a new execution", r.status, r.header.Get("Idempotent-Replayed"), up.count("/very-slow"))
	}
	if out, err := runServeExit(t, "--upstream", up.srv.URL, "--store", "memory", "--handler-timeout", "-1s"); err == nil || !strings.Contains(out, "--handler-timeout -1s: must not be negative") {
		t.Fatalf("--handler-timeout -1s: %v %s", err, out)
	}
	cmd := newServe()
	if err := cmd.Flags().Parse([]string{"--handler-timeout", "1d12h"}); err != nil {
		t.Fatal(err)
	}
	if d := cmd.Flags().Lookup("handler-timeout").Value.String(); d != (36 * time.Hour).String() {
		t.Fatalf("--handler-timeout 1d12h reads back %q, want 36h0m0s", d)
	}
}

// The start-up store check (--store-check) tells a SQL store whose table
// does not exist from one that does not answer, and says what to do.
func TestStartupStoreCheckNotMigrated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := sqlitestore.Open(filepath.Join(t.TempDir(), "keys.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	opened := &openedStore{Store: s, ping: s.Ping, close: s.Close}
	f := serveFlags{store: "sqlite:keys.db", storeTimeout: 5 * time.Second, storeCheck: "fail"}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))

	err = startupStoreCheck(ctx, log, opened, f)
	if !errors.Is(err, keystore.ErrNotMigrated) || !strings.Contains(err.Error(), "is not migrated") || !strings.Contains(err.Error(), "restart idem serve") {
		t.Fatalf("--store-check=fail on an unmigrated store: %v, want not migrated and what to do", err)
	}
	f.storeCheck = "warn"
	if err := startupStoreCheck(ctx, log, opened, f); err != nil || !strings.Contains(logs.String(), "STORE NOT MIGRATED") {
		t.Fatalf("--store-check=warn: %v, log %q", err, logs.String())
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	f.storeCheck = "fail"
	if err := startupStoreCheck(ctx, log, opened, f); err != nil {
		t.Fatalf("after Migrate: %v", err)
	}
}
