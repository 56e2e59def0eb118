package httptestx

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// errs records what a check reports instead of failing the test.
type errs struct {
	testing.TB
	got []string
}

func (e *errs) Helper()                        {}
func (e *errs) Error(args ...any)              { e.got = append(e.got, fmt.Sprint(args...)) }
func (e *errs) Errorf(format string, a ...any) { e.got = append(e.got, fmt.Sprintf(format, a...)) }

func TestCheckChargedOnce(t *testing.T) {
	want := func(key string) string { return "ch_" + key }
	for _, tc := range []struct {
		name    string
		charges []string // keys, one a charge
		finals  []Final
		errs    int
	}{
		{"each once, one replay", []string{"k-0", "k-1"}, []Final{{Answer: "ch_k-0"}, {Answer: "ch_k-1", Replayed: true, ChargedBefore: true}}, 0},
		{"charged twice", []string{"k-0", "k-0"}, []Final{{Answer: "ch_k-0", Replayed: true, ChargedBefore: true}}, 1},
		{"never charged", nil, []Final{{Answer: "ch_k-0", Replayed: true, ChargedBefore: true}}, 1},
		{"another answer", []string{"k-0"}, []Final{{Answer: "ch_other", Replayed: true, ChargedBefore: true}}, 1},
		{"charged before, not replayed", []string{"k-0"}, []Final{{Answer: "ch_k-0", ChargedBefore: true}}, 1},
		{"no replay at all", []string{"k-0"}, []Final{{Answer: "ch_k-0"}}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l Ledger
			for _, k := range tc.charges {
				l.Charge(k)
			}
			e := &errs{TB: t}
			l.CheckChargedOnce(e, tc.finals, want)
			if len(e.got) != tc.errs {
				t.Fatalf("%d errors %q, want %d", len(e.got), e.got, tc.errs)
			}
		})
	}
	var l Ledger
	if l.Charged("k") || l.Charge("k") != 1 || l.Charge("k") != 2 || !l.Charged("k") {
		t.Fatal("Charge does not count a key's charges from 1")
	}
}

func TestOutcomes(t *testing.T) {
	var o Outcomes[string]
	if o.First() != "" || len(o.All()) != 0 {
		t.Fatal("the zero Outcomes is not empty")
	}
	o.Add("a")
	o.Add("b")
	if o.First() != "a" || fmt.Sprint(o.All()) != "[a b]" {
		t.Fatalf("First %q, All %v, want a and [a b]", o.First(), o.All())
	}
}

func TestRetry(t *testing.T) {
	var l Ledger
	var mu sync.Mutex
	timeouts := map[string][]time.Duration{}
	// The provider charges on each attempt; a client is done at its fifth.
	finals := l.Retry(3, func(key string, timeout time.Duration) (string, bool, bool) {
		n := l.Charge(key)
		mu.Lock()
		timeouts[key] = append(timeouts[key], timeout)
		mu.Unlock()
		return fmt.Sprint(key, "#", n), false, n == 5
	})
	for i, f := range finals {
		key := KeyOf(i)
		if f != (Final{Answer: key + "#5", ChargedBefore: true, Attempts: 5}) {
			t.Errorf("%s: %+v, want its fifth answer after 5 attempts, charged before", key, f)
		}
		if got := fmt.Sprint(timeouts[key]); got != "[50ms 50ms 50ms 10s 10s]" {
			t.Errorf("%s: timeouts %s", key, got)
		}
	}
}
