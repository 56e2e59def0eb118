package keystore_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	_ "modernc.org/sqlite" // "sqlite"

	"github.com/idem-go/idem/internal/dbtest"
	"github.com/idem-go/idem/keystore"
)

// killEnv names the SQLite file a re-executed test binary holds a key in
// until it is killed.
const killEnv = "IDEM_KEYSTORE_KILL_CHILD"

// TestDoHolderKilled SIGKILLs a process in the middle of Do's effect (the
// test binary, re-executed) and checks that the key is free one lease later:
// a dead holder's renewals stop with it, and the next Reserve after the
// lease and a margin takes the key over.
func TestDoHolderKilled(t *testing.T) {
	if path := os.Getenv(killEnv); path != "" {
		holdUntilKilled(t, path)
		return
	}
	t.Parallel()
	path := filepath.Join(t.TempDir(), "keys.db")
	s := dbtest.SQLiteStore(t, path)
	cmd := exec.Command(os.Args[0], "-test.run=^TestDoHolderKilled$", "-test.count=1")
	cmd.Env = append(os.Environ(), killEnv+"="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait() //nolint:errcheck // killed below
	sc := bufio.NewScanner(out)
	acting := false
	for sc.Scan() {
		if sc.Text() == "acting" {
			acting = true
			break
		}
	}
	if !acting {
		_ = cmd.Process.Kill()
		t.Fatal("the child never started its effect")
	}
	if keystore.CanExtend(s) {
		// Let it renew a few times before it dies: the key must then be
		// free one lease after the last renewal, not after the first.
		time.Sleep(2 * testLease)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	_ = cmd.Wait()
	ctx := context.Background()
	c, err := s.Reserve(ctx, "killed", nil, time.Minute)
	// The last renewal was at most a third of a lease before the kill.
	if err != nil || (c.State != keystore.InProgress && time.Since(killed) < testLease/2) {
		t.Fatalf("right after the kill: %v, %v; want the dead holder's lease still in progress", c.State, err)
	}
	const margin = 500 * time.Millisecond
	time.Sleep(time.Until(killed.Add(testLease + margin)))
	c, err = s.Reserve(ctx, "killed", nil, time.Minute)
	if err != nil || c.State != keystore.Acquired || !c.Takeover {
		t.Fatalf("a lease plus %v after the kill: %v (takeover %v), %v; want Acquired with Takeover", margin, c.State, c.Takeover, err)
	}
}

// holdUntilKilled is the child: it runs Do with an effect that never ends.
func holdUntilKilled(t *testing.T, path string) {
	s := dbtest.SQLiteStore(t, path)
	_, _, err := keystore.Do(context.Background(), s, "killed", nil, func(ctx context.Context) ([]byte, error) {
		fmt.Println("acting")
		<-ctx.Done()
		return nil, ctx.Err()
	}, keystore.WithLease(testLease))
	t.Fatalf("the effect ended (%v); it should have been killed", err)
}
