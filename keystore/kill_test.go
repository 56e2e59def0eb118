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

	"github.com/idem-go/idem/internal/testsupport/dbtest"
	"github.com/idem-go/idem/keystore"
)

// killEnv names the SQLite file a re-executed test binary holds a key in
// until it is killed.
const killEnv = "IDEM_KEYSTORE_KILL_CHILD"

// killLease is the lease of TestDoHolderKilled's child: long enough that a
// renewal delayed by a loaded machine still lands in time (the child must
// live until the kill), short enough to wait out.
const killLease = 2 * time.Second

// TestDoHolderKilled SIGKILLs a process in the middle of Do's effect (the
// test binary, re-executed) and checks that the key is free one lease after
// the holder's last renewal: a dead holder's renewals stop with it, and the
// first Reserve past the lease's end, by the store's own record, takes the
// key over. Nothing here depends on how fast the machine is: the lease's end
// is read from the store, not assumed from the test's clock.
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
	ctx := context.Background()
	first, err := keystore.Inspect(ctx, s, "killed")
	if err != nil || first.State != keystore.InProgress {
		_ = cmd.Process.Kill()
		t.Fatalf("while the child acts: %+v, %v; want the key in progress", first, err)
	}
	if keystore.CanExtend(s) {
		// Let it renew before it dies: the key must then be free one
		// lease after the last renewal, not after the first.
		if !waitFor(2*time.Minute, func() bool {
			ki, err := keystore.Inspect(ctx, s, "killed")
			return err == nil && ki.Expires.After(first.Expires)
		}) {
			_ = cmd.Process.Kill()
			t.Fatal("the child's lease was never renewed")
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatalf("kill: %v (the child ended by itself: its effect was cancelled)", err)
	}
	_ = cmd.Wait()
	last, err := keystore.Inspect(ctx, s, "killed")
	if err != nil || last.State != keystore.InProgress {
		t.Fatalf("after the kill: %+v, %v; want the dead holder's lease still recorded", last, err)
	}
	if keystore.CanExtend(s) && !last.Expires.After(first.Expires) {
		t.Fatalf("lease ends %v, as first reserved (%v): the renewals were not recorded", last.Expires, first.Expires)
	}
	// Before the lease's end a Reserve must wait; once past it, take over.
	c, err := s.Reserve(ctx, "killed", nil, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if c.State == keystore.Acquired && time.Now().Before(last.Expires) {
		t.Fatalf("taken over before the dead holder's lease ended (%v)", last.Expires)
	}
	if c.State != keystore.Acquired {
		time.Sleep(time.Until(last.Expires.Add(50 * time.Millisecond)))
		c, err = s.Reserve(ctx, "killed", nil, time.Minute)
	}
	if err != nil || c.State != keystore.Acquired || !c.Takeover {
		t.Fatalf("past the dead holder's lease (%v): %v (takeover %v), %v; want Acquired with Takeover", last.Expires, c.State, c.Takeover, err)
	}
}

// waitFor polls cond until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// holdUntilKilled is the child: it runs Do with an effect that never ends.
func holdUntilKilled(t *testing.T, path string) {
	s := dbtest.SQLiteStore(t, path)
	_, _, err := keystore.Do(context.Background(), s, "killed", nil, func(ctx context.Context) ([]byte, error) {
		fmt.Println("acting")
		<-ctx.Done()
		return nil, ctx.Err()
	}, keystore.WithLease(killLease))
	t.Fatalf("the effect ended (%v); it should have been killed", err)
}
