package httptestx

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// Ledger is a payment provider's record of the charges it made, by
// idempotency key, for a test whose clients retry with the same key until
// they succeed. It is safe for concurrent use.
type Ledger struct {
	mu      sync.Mutex
	charges map[string]int
}

// Charge records a charge for key and returns its number for the key, 1
// for the first.
func (l *Ledger) Charge(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.charges == nil {
		l.charges = map[string]int{}
	}
	l.charges[key]++
	return l.charges[key]
}

// Charged reports whether key was charged at least once.
func (l *Ledger) Charged(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.charges[key] > 0
}

// Final is the answer a client ended with for one key.
type Final struct {
	// Answer is the answer, in the form want of CheckChargedOnce gives
	// the first charge's.
	Answer   string
	Replayed bool
	// ChargedBefore is whether the key had been charged before the final
	// attempt was sent: then its answer must be a replay.
	ChargedBefore bool
	// Attempts is how many attempts the client made.
	Attempts int
}

// KeyOf is the key the client of finals[i] sends: "k-i".
func KeyOf(i int) string { return fmt.Sprintf("k-%d", i) }

// Retry runs a client for each of keys keys, KeyOf(0) on, concurrently,
// and returns what each ended with. A client calls attempt with its key
// and a timeout until attempt reports done, with the answer it got and
// whether it was a replay: a timeout of 50 ms for the first three
// attempts, less than the provider takes, then of 10 s, so that the test
// ends even where every attempt charges again. A Final is the last
// attempt's answer, with the number of attempts and whether the key had
// been charged when that attempt was sent.
func (l *Ledger) Retry(keys int, attempt func(key string, timeout time.Duration) (answer string, replayed, done bool)) []Final {
	finals := make([]Final, keys)
	var wg sync.WaitGroup
	for k := range keys {
		wg.Go(func() {
			key := KeyOf(k)
			for n := 1; ; n++ {
				timeout := 50 * time.Millisecond
				if n > 3 {
					timeout = 10 * time.Second
				}
				charged := l.Charged(key)
				answer, replayed, done := attempt(key, timeout)
				if done {
					finals[k] = Final{Answer: answer, Replayed: replayed, ChargedBefore: charged, Attempts: n}
					return
				}
			}
		})
	}
	wg.Wait()
	return finals
}

// CheckChargedOnce fails t unless each key KeyOf(i) was charged once and
// finals[i] is the first charge's answer, want(key), replayed if the key
// was charged before the final attempt; and unless the first attempt of
// at least one key reached the provider before the client gave up on it
// (else nothing was tested).
func (l *Ledger) CheckChargedOnce(t testing.TB, finals []Final, want func(key string) string) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	replays := 0
	for i, f := range finals {
		key := KeyOf(i)
		if l.charges[key] != 1 {
			t.Errorf("%s charged %d times, want once", key, l.charges[key])
		}
		// Under load an attempt may time out before it reaches the
		// handler; once one has, every later answer is its replay.
		if f.Answer != want(key) || (f.ChargedBefore && !f.Replayed) {
			t.Errorf("%s: after %d attempts %q replayed=%v, want %q (replayed: %v)", key, f.Attempts, f.Answer, f.Replayed, want(key), f.ChargedBefore)
		}
		if f.ChargedBefore {
			replays++
		}
	}
	if replays == 0 {
		t.Error("no key's first attempt reached the handler before the client gave up on it: nothing was tested")
	}
}
