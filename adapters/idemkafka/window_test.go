package idemkafka_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/idemkafka"
	"github.com/idem-go/idem/window/diskwindow"
)

// TestWindowMode: key-only dedup on a disk-backed set. A duplicate id runs
// the handler once; a handler that fails once is retried, and its key is
// recorded only after it succeeds; a restart before the offset commit
// (the set closed and reopened from disk, as after a crash) skips every
// record already applied.
func TestWindowMode(t *testing.T) {
	t.Parallel()
	all := ids("w", 10)
	f := newFixture(t, 2, append(all, all[0])...)
	dir := t.TempDir()
	open := func() *diskwindow.Set {
		s, err := diskwindow.Open(dir, 24*time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	snd := newSender("w-003", errors.New("index unavailable"))
	h := snd.handle
	consumer := func(s *diskwindow.Set, opts ...idemkafka.Option) *idemkafka.WindowConsumer {
		con, err := idemkafka.NewWindowConsumer(s, h, groupOpts(f.c, "g", "orders"), opts...)
		if err != nil {
			t.Fatal(err)
		}
		return con
	}
	set := open()
	first := newTally()
	f.runCommitsRejected(consumer(set, first.option(), fastRetries(3)), first, len(all)+1)
	first.want(t, "", map[idem.Outcome]int{idem.Applied: len(all), idem.Duplicate: 1})
	if err := set.Close(); err != nil {
		t.Fatal(err)
	}
	set = open()
	defer set.Close()
	second := newTally()
	_ = runUntil(t, consumer(set, second.option()), second, len(all)+1)
	second.want(t, "after a restart (from the set on disk)", map[idem.Outcome]int{idem.Duplicate: len(all) + 1})
	snd.requireOnce(t, all)
	f.requireCommittedToEnd()
}

// A set that fails stops the consumer before anything is marked: fail
// closed, nothing skipped.
func TestWindowSetDown(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1, ids("d", 3)...)
	s, err := diskwindow.Open(t.TempDir(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	s.Close() // every call now fails
	ran := 0
	con, err := idemkafka.NewWindowConsumer(s, func(context.Context, *kgo.Record) error { ran++; return nil }, groupOpts(f.c, "g", "orders"))
	if err != nil {
		t.Fatal(err)
	}
	if err := runToError(t, con); !errors.Is(err, diskwindow.ErrClosed) {
		t.Fatalf("Run: %v, want the set's error", err)
	}
	if ran != 0 {
		t.Fatalf("the handler ran %d times with the set down", ran)
	}
	if got := committed(t, f.c, "g", "orders"); len(got) != 0 {
		t.Fatalf("offsets committed with the set down: %v", got)
	}
}
