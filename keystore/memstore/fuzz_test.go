package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/memstore"
)

// FuzzScopeIsolation checks that the internal key encoding (scope length,
// scope, key) never lets two different (scope, key) pairs share an entry,
// whatever bytes keys hold.
func FuzzScopeIsolation(f *testing.F) {
	f.Add("a", "b\x00c", "a\x00b", "c")
	f.Add("default", "k", "default", "k")
	f.Add("ab", "c", "a", "bc")
	f.Add("a", "\x01ab", "a\x01a", "b")
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
