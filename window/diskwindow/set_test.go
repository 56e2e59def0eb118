package diskwindow

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

var t0 = time.Unix(1_700_000_000, 0)

func mustOpen(t testing.TB, dir string, w time.Duration, opts ...Option) *Set {
	t.Helper()
	s, err := Open(dir, w, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func add(t testing.TB, s *Set, scope, id string, now time.Time) bool {
	t.Helper()
	dup, err := s.Add(context.Background(), scope, id, now)
	if err != nil {
		t.Fatal(err)
	}
	return dup
}

// filled opens the set in dir with a window of an hour and adds the ids
// 0 to n-1 in the default scope at t0.
func filled(t testing.TB, dir string, n int) *Set {
	t.Helper()
	s := mustOpen(t, dir, time.Hour)
	for i := range n {
		add(t, s, "", fmt.Sprint(i), t0)
	}
	return s
}

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		killChild()
		return
	}
	goleak.VerifyTestMain(m)
}

func TestAddSealRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := mustOpen(t, dir, time.Hour, WithMaxOpen(1000))
	for i := range 3500 {
		if add(t, s, "a", fmt.Sprint(i), t0) {
			t.Fatalf("id %d: duplicate on first add", i)
		}
	}
	s.waitMerges()
	if st := s.Stats(); st.Generations != 3 || st.Files != 1 {
		t.Fatalf("%d generations in %d files, want 3 merged in 1", st.Generations, st.Files)
	}
	checks := 0
	check := func(s *Set) {
		t.Helper()
		checks++
		for i := range 3500 {
			if !add(t, s, "a", fmt.Sprint(i), t0.Add(time.Minute)) {
				t.Fatalf("id %d: new on second add", i)
			}
		}
		if add(t, s, "b", fmt.Sprint(checks), t0.Add(time.Minute)) {
			t.Fatal("scope b shares scope a's ids")
		}
	}
	check(s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Add(context.Background(), "a", "x", t0); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
	s = mustOpen(t, dir, time.Hour)
	defer s.Close()
	check(s)
	st := s.Stats()
	if st.IDs != 3501 && st.IDs != 3502 || st.Generations != 3 || st.Files != 1 {
		t.Fatalf("after restart: %+v", st)
	}
}

func TestExpiry(t *testing.T) {
	t.Parallel()
	s := mustOpen(t, t.TempDir(), 10*time.Minute, WithGenerations(10)) // one a minute
	defer s.Close()
	first := map[int]time.Time{} // the model: each id's first accept
	for m := range 30 {
		now := t0.Add(time.Duration(m) * time.Minute)
		if add(t, s, "", fmt.Sprint(m), now) {
			t.Fatalf("minute %d: new id answered duplicate", m)
		}
		first[m] = now
		for old := range m {
			now := now.Add(time.Second)
			age := now.Sub(first[old])
			dup := add(t, s, "", fmt.Sprint(old), now)
			switch {
			case age < 10*time.Minute && !dup:
				t.Fatalf("minute %d: id of minute %d (age %v) answered new", m, old, age)
			case age >= 11*time.Minute && dup:
				t.Fatalf("minute %d: id of minute %d (age %v) still a duplicate", m, old, age)
			}
			if !dup {
				first[old] = now
			}
		}
	}
	// Seals and merges run in the background, and a merge in flight still
	// holds the generations it is merging (expired ones too) until its
	// file is in place: count once they are done, expiry has run again
	// at the last Add's time, and what that started is done too.
	settle(s)
	if err := s.Expire(t0.Add(29*time.Minute + 29*time.Second)); err != nil { // the last Add's time
		t.Fatal(err)
	}
	settle(s)
	if g := s.Stats().Generations; g > 12 {
		t.Fatalf("%d generations kept for a 10-minute horizon cut in 10", g)
	}
}

// settle waits until no seal or merge runs in the background.
func settle(s *Set) {
	for {
		s.mu.Lock()
		var wait chan struct{}
		switch {
		case s.sealDone != nil:
			wait = s.sealDone
		case s.merging != nil:
			wait = s.merging
		}
		s.mu.Unlock()
		if wait == nil {
			return
		}
		<-wait
	}
}

func TestAddBatch(t *testing.T) {
	t.Parallel()
	s := mustOpen(t, t.TempDir(), time.Hour, WithMaxOpen(100))
	defer s.Close()
	ctx := context.Background()
	ids := []string{"a", "b", "a", "c"}
	got, err := s.AddBatch(ctx, "s", ids, t0, nil)
	if err != nil || fmt.Sprint(got) != "[false false true false]" {
		t.Fatalf("%v %v", got, err)
	}
	if err := s.Seal(); err != nil {
		t.Fatal(err)
	}
	got, err = s.AddBatch(ctx, "s", []string{"c", "d", "d", "a"}, t0, got[:0])
	if err != nil || fmt.Sprint(got) != "[true false true true]" {
		t.Fatalf("%v %v", got, err)
	}
	long := string(make([]byte, MaxKeyLen))
	if _, err := s.AddBatch(ctx, "s", []string{long}, t0, nil); !errors.Is(err, ErrTooLong) {
		t.Fatalf("long id: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Add(cctx, "s", "e", t0); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled: %v", err)
	}
}

func TestDamagedRefusedByName(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := filled(t, dir, 5000)
	if err := s.Seal(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	files, _ := filepath.Glob(filepath.Join(dir, "*.edf"))
	if len(files) != 1 {
		t.Fatalf("files %v", files)
	}
	b, _ := os.ReadFile(files[0])
	b[len(b)-100] ^= 1
	os.WriteFile(files[0], b, 0o600)
	_, err := Open(dir, time.Hour, WithVerify())
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.File != files[0] {
		t.Fatalf("Open WithVerify: %v", err)
	}
	s = mustOpen(t, dir, time.Hour) // the index is intact: the lookup refuses
	defer s.Close()
	var lookupErr error
	for i := range 5000 {
		if _, err := s.Add(context.Background(), "", fmt.Sprint(i), t0); err != nil {
			lookupErr = err
			break
		}
	}
	if !errors.As(lookupErr, &ce) || ce.File != files[0] {
		t.Fatalf("lookup: %v", lookupErr)
	}
}

func TestTornJournal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := filled(t, dir, 100)
	s.Close()
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	f, _ := os.OpenFile(logs[0], os.O_APPEND|os.O_WRONLY, 0)
	f.Write([]byte{3, 0, 0, 0, 1, 2}) // half a record
	f.Close()
	s = mustOpen(t, dir, time.Hour)
	defer s.Close()
	for i := range 100 {
		if !add(t, s, "", fmt.Sprint(i), t0) {
			t.Fatalf("id %d forgotten", i)
		}
	}
	if add(t, s, "", "new", t0) {
		t.Fatal("new id answered duplicate")
	}
}

// withoutAdvise reads sealed blocks from several goroutines at once, as
// where posix_fadvise is not available, instead of starting them all with
// POSIX_FADV_WILLNEED and reading them in turn.
func withoutAdvise() Option { return func(c *config) error { c.noAdvise = true; return nil } }

// withoutMerge keeps each sealed generation in a file of its own.
func withoutMerge() Option { return func(c *config) error { c.noMerge = true; return nil } }

// withSealHook calls fn in each background seal before it writes the file.
func withSealHook(fn func()) Option {
	return func(c *config) error { c.onSeal = &sealHook{fn}; return nil }
}

// TestSealBackground holds a background seal before it writes: the frozen
// generation answers from memory meanwhile (its expired ids new), a copy
// of the directory taken then (both journals, no file: a crash) opens with
// the older journal sealed, and the held seal completes into one file.
func TestSealBackground(t *testing.T) {
	dir := t.TempDir()
	entered, hold := make(chan struct{}), make(chan struct{})
	s := mustOpen(t, dir, time.Hour, WithMaxOpen(1000), withSealHook(func() { entered <- struct{}{}; <-hold }))
	ctx := context.Background()
	ids := func(prefix string, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("%s-%d", prefix, i)
		}
		return out
	}
	first, second := ids("a", 1000), ids("b", 500)
	if _, err := s.AddBatch(ctx, "p", first, t0, nil); err != nil {
		t.Fatal(err)
	}
	<-entered // the first generation is frozen, its file not written
	if _, err := s.AddBatch(ctx, "p", second, t0.Add(time.Second), nil); err != nil {
		t.Fatal(err)
	}
	dups, err := s.AddBatch(ctx, "p", append(append([]string(nil), first...), second...), t0.Add(2*time.Second), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range dups {
		if !d {
			t.Fatalf("id %d answered new while its generation is sealed in the background", i)
		}
	}
	if st := s.Stats(); st.Files != 0 || st.OpenIDs != 1500 {
		t.Fatalf("while the seal is held: %+v; want no file and 1500 ids in memory", st)
	}
	crashed := t.TempDir()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	logs := 0
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(e.Name(), ".log") {
			logs++
		}
		if err := os.WriteFile(filepath.Join(crashed, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if logs != 2 {
		t.Fatalf("%d journals while the seal is held; want 2", logs)
	}
	// Past the horizon, the frozen generation's ids are new (SeenBatch
	// records nothing).
	seen, err := s.SeenBatch(ctx, "p", first, t0.Add(2*time.Hour), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range seen {
		if d {
			t.Fatalf("id %d expired an hour ago answered duplicate from the frozen generation", i)
		}
	}
	close(hold)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// The crash's copy: the older journal is sealed at Open.
	r := mustOpen(t, crashed, time.Hour)
	defer r.Close()
	if st := r.Stats(); st.Generations != 1 || st.OpenIDs != 500 {
		t.Fatalf("after Open of the crash: %+v; want 1 sealed generation and 500 open ids", st)
	}
	if _, err := os.Stat(logPath(crashed, 0)); !os.IsNotExist(err) {
		t.Fatalf("the sealed generation's journal is still there: %v", err)
	}
	dups, err = r.SeenBatch(ctx, "p", append(append([]string(nil), first...), second...), t0.Add(3*time.Second), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range dups {
		if !d {
			t.Fatalf("id %d forgotten by the Open that sealed the older journal", i)
		}
	}
	fresh, err := r.SeenBatch(ctx, "p", ids("c", 100), t0.Add(3*time.Second), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range fresh {
		if d {
			t.Fatalf("never-sent id %d answered duplicate", i)
		}
	}
}
