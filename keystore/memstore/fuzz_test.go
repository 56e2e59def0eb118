package memstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/memstore"
)

// scopeSeeds are (scope, key, scope, key) pairs whose naive concatenations
// collide. Keys are UTF-8 without NUL (idem.ValidateKey), so the seeds that
// used to split a NUL between scope and key split a control byte instead;
// TestScopeSeedsAreValid keeps them from silently becoming no-ops.
var scopeSeeds = [][4]string{
	{"a", "b\x01c", "a\x01b", "c"},
	{"default", "k", "default", "k"},
	{"ab", "c", "a", "bc"},
	{"a", "\x01ab", "a\x01a", "b"},
	{"x", "k", "default", "\x01xk"}, // a named scope's prefix is its length byte and name
	{"é", "k", "\x02", "ék"},        // two-byte scope against the key that would follow its length byte
	{"default", "\x07default", "default", "k"},
}

func TestScopeSeedsAreValid(t *testing.T) {
	for _, s := range scopeSeeds {
		if err := errors.Join(keystore.ValidateScope(s[0]), keystore.ValidateScope(s[2]),
			keystore.ValidateReserve(s[1], nil, time.Minute), keystore.ValidateReserve(s[3], nil, time.Minute)); err != nil {
			t.Errorf("seed %q is rejected, so the fuzz target checks nothing with it: %v", s, err)
		}
	}
}

// FuzzScopeIsolation checks that the internal key encoding (scope length,
// scope, key) never lets two different (scope, key) pairs share an entry,
// whatever bytes keys hold.
func FuzzScopeIsolation(f *testing.F) {
	for _, s := range scopeSeeds {
		f.Add(s[0], s[1], s[2], s[3])
	}
	f.Fuzz(func(t *testing.T, scope1, key1, scope2, key2 string) {
		if keystore.ValidateScope(scope1) != nil || keystore.ValidateScope(scope2) != nil ||
			keystore.ValidateReserve(key1, nil, time.Minute) != nil || keystore.ValidateReserve(key2, nil, time.Minute) != nil {
			return // not a valid scope or key: nothing to check
		}
		ctx := context.Background()
		s, err := memstore.New()
		if err != nil {
			t.Fatal(err)
		}
		v1, _ := s.Scope(scope1)
		v2, _ := s.Scope(scope2)
		if c, err := v1.Reserve(ctx, key1, nil, time.Minute); err != nil || c.State != keystore.Acquired {
			t.Fatalf("first Reserve: %+v %v", c, err)
		}
		c, err := v2.Reserve(ctx, key2, nil, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		same := scope1 == scope2 && key1 == key2
		if want := map[bool]keystore.State{true: keystore.InProgress, false: keystore.Acquired}[same]; c.State != want {
			t.Fatalf("(%q, %q) then (%q, %q): %v, want %v", scope1, key1, scope2, key2, c.State, want)
		}
	})
}
