package window_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/window"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const w = 2 * time.Minute

func newDedup(t testing.TB, opts ...window.Option) *window.Dedup {
	t.Helper()
	d, err := window.New(w, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

type call struct {
	scope, id string
	at        time.Duration
	dup       bool
	original  uint64
}

func TestSeen(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		calls []call
	}{
		{"a duplicate within the window carries the original sequence", []call{
			{"s", "a", 0, false, 1},
			{"s", "b", time.Second, false, 2},
			{"s", "a", 10 * time.Second, true, 1},
			{"s", "a", w - time.Nanosecond, true, 1},
			{"s", "b", w, true, 2}, // b's window is open until 2m1s
		}},
		{"exactly at the window the id is new again, with a new sequence", []call{
			{"s", "a", 0, false, 1},
			{"s", "a", w, false, 2},
			{"s", "a", 2*w - time.Nanosecond, true, 2},
			{"s", "a", 2 * w, false, 3},
		}},
		{"duplicates do not extend the window", []call{
			{"s", "a", 0, false, 1},
			{"s", "a", w / 2, true, 1},
			{"s", "a", w - time.Nanosecond, true, 1},
			{"s", "a", w, false, 2}, // though the last duplicate was 1ns ago
		}},
		{"scopes are independent; sequences are global", []call{
			{"orders", "a", 0, false, 1},
			{"payments", "a", 0, false, 2},
			{"orders", "a", 0, true, 1},
			{"payments", "a", 0, true, 2},
			{"", "a", 0, false, 3},
			{"orders|g1", "a", 0, false, 4}, // SQS FIFO: queue plus message group
		}},
		{"scope and id are not concatenated ambiguously", []call{
			{"ab", "c", 0, false, 1},
			{"a", "bc", 0, false, 2},
			{"abc", "", 0, false, 3},
			{"", "abc", 0, false, 4},
			{"a", "bc", 0, true, 2},
		}},
		{"a clock that steps back is held at the latest time", []call{
			{"s", "a", 10 * time.Second, false, 1},
			{"s", "b", 0, false, 2},                       // recorded as of 10s
			{"s", "b", w + 9*time.Second, true, 2},        // so still open here
			{"s", "a", time.Second, true, 1},              // stepping back does not reopen anything
			{"s", "a", w + 10*time.Second, false, 3},      // a expires at 10s + w
			{"s", "b", w + 10*time.Second, false, 4},      // and so does b
			{"s", "c", -time.Hour, false, 5},              // far back: held at 2m10s
			{"s", "c", 2*w + 10*time.Second - 1, true, 5}, // open until 4m10s
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := newDedup(t)
			for i, c := range tc.calls {
				dup, orig := d.Seen(c.scope, c.id, t0.Add(c.at))
				if dup != c.dup || orig != c.original {
					t.Fatalf("call %d Seen(%q, %q, +%v) = (%v, %d), want (%v, %d)", i, c.scope, c.id, c.at, dup, orig, c.dup, c.original)
				}
			}
		})
	}
}

func TestMemoryIsBoundedByRateTimesWindow(t *testing.T) {
	t.Parallel()
	d := newDedup(t)
	// 1 id per 10ms for 10 windows: at most w/10ms ids are ever live.
	const step = 10 * time.Millisecond
	limit := int(w / step)
	maxLen := 0
	for i := range 10 * limit {
		if dup, _ := d.Seen("s", fmt.Sprint(i), t0.Add(time.Duration(i)*step)); dup {
			t.Fatalf("id %d reported as a duplicate", i)
		}
		maxLen = max(maxLen, d.Len())
	}
	if maxLen != limit {
		t.Fatalf("at most %d live ids, want %d", maxLen, limit)
	}
	if n := d.Expire(t0.Add(20 * w)); n != limit || d.Len() != 0 {
		t.Fatalf("Expire dropped %d, Len %d; want %d, 0", n, d.Len(), limit)
	}
}

func TestMaxEntries(t *testing.T) {
	t.Parallel()
	d := newDedup(t, window.WithMaxEntries(2))
	mustAdd := func(id string, at time.Duration, wantDup bool, wantOrig uint64, wantErr error) {
		t.Helper()
		dup, orig, err := d.Add("s", id, t0.Add(at))
		if dup != wantDup || orig != wantOrig || !errors.Is(err, wantErr) {
			t.Fatalf("Add(%q, +%v) = (%v, %d, %v), want (%v, %d, %v)", id, at, dup, orig, err, wantDup, wantOrig, wantErr)
		}
	}
	mustAdd("a", 0, false, 1, nil)
	mustAdd("b", time.Second, false, 2, nil)
	mustAdd("c", time.Second, false, 0, window.ErrFull)
	mustAdd("a", time.Second, true, 1, nil) // duplicates are answered even when full
	if dup, orig := d.Seen("c", "c", t0); dup || orig != 0 {
		t.Fatalf("Seen on a full Dedup = (%v, %d), want (false, 0)", dup, orig)
	}
	mustAdd("c", w, false, 3, nil) // a expired, a slot is free
	mustAdd("a", w, false, 0, window.ErrFull)
	if d.Len() != 2 {
		t.Fatalf("Len %d, want 2", d.Len())
	}
}

func TestTooLong(t *testing.T) {
	t.Parallel()
	d := newDedup(t)
	long := strings.Repeat("x", window.MaxKeyLen)
	if _, orig, err := d.Add("s", long, t0); !errors.Is(err, window.ErrTooLong) || orig != 0 {
		t.Fatalf("got (%d, %v), want ErrTooLong", orig, err)
	}
	if dup, orig, err := d.Add("", long, t0); dup || orig != 1 || err != nil {
		t.Fatalf("exactly MaxKeyLen: (%v, %d, %v)", dup, orig, err)
	}
	if dup, orig, err := d.Add("", long, t0); !dup || orig != 1 || err != nil {
		t.Fatalf("exactly MaxKeyLen, again: (%v, %d, %v)", dup, orig, err)
	}
}

func TestNewValidatesOptions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		w    time.Duration
		opts []window.Option
	}{
		{0, nil},
		{-time.Second, nil},
		{time.Second, []window.Option{window.WithMaxEntries(0)}},
		{time.Second, []window.Option{nil}},
	} {
		if _, err := window.New(tc.w, tc.opts...); !errors.Is(err, idem.ErrInvalidOption) || !strings.HasPrefix(err.Error(), "window: ") {
			t.Errorf("New(%v, …) = %v, want a window: error wrapping idem.ErrInvalidOption", tc.w, err)
		}
	}
}

func TestConcurrentSeenOfOneID(t *testing.T) {
	t.Parallel()
	d := newDedup(t)
	const goroutines, ids = 16, 300
	var firsts [ids]atomic.Int32
	var origs [ids]atomic.Uint64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range goroutines {
		wg.Go(func() {
			<-start
			for i := range ids {
				dup, orig := d.Seen("s", fmt.Sprint(i), t0)
				if !dup {
					firsts[i].Add(1)
				}
				if prev := origs[i].Swap(orig); prev != 0 && prev != orig {
					t.Errorf("id %d: originals %d and %d", i, prev, orig)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	for i := range ids {
		if n := firsts[i].Load(); n != 1 {
			t.Fatalf("id %d accepted %d times, want exactly once", i, n)
		}
	}
	if d.Len() != ids {
		t.Fatalf("Len %d, want %d", d.Len(), ids)
	}
}

func TestContentID(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]string{
		"":      "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
		"hello": "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824",
	} {
		if got := window.ContentID([]byte(body)); got != want {
			t.Errorf("ContentID(%q) = %s, want %s", body, got, want)
		}
	}
}
