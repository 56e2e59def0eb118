package keyclaim

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/memstore"
)

func TestWait(t *testing.T) {
	if got, want := Wait(5*time.Second, 0), (keystore.Wait{CallTimeout: 5 * time.Second}); got != want {
		t.Errorf("Wait(5s, 0) = %+v, want %+v", got, want)
	}
	want := keystore.Wait{Min: 10 * time.Millisecond, Max: 250 * time.Millisecond, Timeout: 2 * time.Second, CallTimeout: time.Second}
	if got := Wait(time.Second, 2*time.Second); got != want {
		t.Errorf("Wait(1s, 2s) = %+v, want %+v", got, want)
	}
}

// TestRelease releases a held key (silently, and a new request takes it),
// then the same claim again: its token is stale, which is logged at Info
// with the package's prefix and the reason.
func TestRelease(t *testing.T) {
	s, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	c, err := s.Reserve(ctx, "k", nil, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	Release(ctx, s, c, logger, "pkg", "handler failed")
	if buf.Len() != 0 {
		t.Fatalf("release of a held key logged %q", buf.String())
	}
	c2, err := s.Reserve(ctx, "k", nil, time.Minute)
	if err != nil || c2.State != keystore.Acquired {
		t.Fatalf("Reserve after Release: %+v %v, want a new claim", c2, err)
	}
	Release(ctx, s, c, logger, "pkg", "again")
	if got := buf.String(); !strings.Contains(got, "level=INFO") || !strings.Contains(got, "pkg: the key was released by an operator") || !strings.Contains(got, "why=again") {
		t.Fatalf("release of a stale claim logged %q, want an Info line from pkg with why=again", got)
	}
}
