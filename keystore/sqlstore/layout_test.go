package sqlstore_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/sqlstore"
	"github.com/idem-go/idem/keystore/storetest"
	"github.com/idem-go/idem/sqldialect"
)

// oldTable creates table as the release before the digest layout did.
func oldTable(t testing.TB, db *sql.DB, d sqldialect.Dialect, table string) {
	t.Helper()
	for _, st := range sqlstore.RowsSchema(d, table) {
		if _, err := db.Exec(st); err != nil {
			t.Fatal(err)
		}
	}
}

func wantLayout(t testing.TB, s *sqlstore.Store, want sqlstore.Layout) {
	t.Helper()
	got, err := s.Layout(context.Background())
	if err != nil || got != want {
		t.Fatalf("Layout: %v %v, want %v", got, err, want)
	}
}

// A table made by the earlier release keeps its layout through Migrate and
// passes the conformance suite.
func TestConformanceRowsLayout(t *testing.T) {
	for _, dc := range dialects {
		t.Run(dc.d.String(), func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) keystore.Store {
				db := dc.open(t)
				oldTable(t, db, dc.d, sqlstore.DefaultTable)
				s := newStore(t, db, dc.d)
				wantLayout(t, s, sqlstore.LayoutRows)
				return s
			})
		})
	}
}

// New tables get the digest layout; the key table has no text key column
// in its primary key; the salt is the table's, so two Stores (two
// processes) on one table agree, and a second Migrate keeps the salt.
func TestDigestLayoutShared(t *testing.T) {
	eachDialect(t, func(t *testing.T, d sqldialect.Dialect, db *sql.DB) {
		ctx := context.Background()
		a := newStore(t, db, d)
		wantLayout(t, a, sqlstore.LayoutDigest)
		b := newStore(t, db, d) // another salt in its SchemaSQL: the table's wins
		c, err := a.Reserve(ctx, "k", nil, time.Minute)
		if err != nil || c.State != keystore.Acquired {
			t.Fatalf("Reserve: %+v %v", c, err)
		}
		if got, err := b.Reserve(ctx, "k", nil, time.Minute); err != nil || got.State != keystore.InProgress {
			t.Fatalf("Reserve on the second store: %+v %v, want in progress", got, err)
		}
		if err := b.Complete(ctx, c, []byte("r"), time.Minute); err != nil {
			t.Fatal(err)
		}
		if got, err := a.Reserve(ctx, "k", nil, time.Minute); err != nil || got.State != keystore.Done || string(got.Result) != "r" {
			t.Fatalf("Reserve after Complete: %+v %v", got, err)
		}
		// Scopes are part of the digest: the same key in another scope is
		// another key.
		other, err := a.Scope("other")
		if err != nil {
			t.Fatal(err)
		}
		if got, err := other.Reserve(ctx, "k", nil, time.Minute); err != nil || got.State != keystore.Acquired {
			t.Fatalf("Reserve in another scope: %+v %v", got, err)
		}
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM ` + sqlstore.DefaultTable + `_meta`).Scan(&n); err != nil || n != 1 {
			t.Fatalf("meta rows: %d %v", n, err)
		}
	})
}

// A digest function that maps every key to one digest: a live row of
// another key is a hard error, never a false duplicate, on every path.
func TestDigestCollision(t *testing.T) {
	eachDialect(t, func(t *testing.T, d sqldialect.Dialect, db *sql.DB) {
		ctx := context.Background()
		s := newStore(t, db, d)
		sqlstore.SetDigest(s, func(_, _ []byte) [16]byte { return [16]byte{0: 0xab} })
		a, err := s.Reserve(ctx, "a", nil, 300*time.Millisecond)
		if err != nil || a.State != keystore.Acquired {
			t.Fatalf("Reserve a: %+v %v", a, err)
		}
		wantCollision := func(what string) {
			t.Helper()
			if c, err := s.Reserve(ctx, "b", nil, time.Minute); !errors.Is(err, sqlstore.ErrDigestCollision) {
				t.Fatalf("Reserve b while a is %s: %+v %v, want ErrDigestCollision", what, c, err)
			}
		}
		wantCollision("in progress")
		// b has no row: every other call sees it as absent and leaves a's
		// row alone.
		if _, err := s.Inspect(ctx, "b"); !errors.Is(err, keystore.ErrNotFound) {
			t.Fatalf("Inspect b: %v, want not found", err)
		}
		forged := a
		forged.Key = "b"
		if err := s.Complete(ctx, forged, []byte("x"), time.Minute); !errors.Is(err, keystore.ErrLeaseLost) {
			t.Fatalf("Complete with b's name and a's token: %v, want lease lost", err)
		}
		if err := s.Release(ctx, forged); !errors.Is(err, keystore.ErrLeaseLost) {
			t.Fatalf("Release with b's name: %v, want lease lost", err)
		}
		if _, err := s.Extend(ctx, forged, time.Minute); !errors.Is(err, keystore.ErrLeaseLost) {
			t.Fatalf("Extend with b's name: %v, want lease lost", err)
		}
		if err := s.Complete(ctx, a, []byte("ra"), 300*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		wantCollision("done")
		if err := s.Forget(ctx, "b"); !errors.Is(err, keystore.ErrNotFound) {
			t.Fatalf("Forget b: %v, want not found", err)
		}
		if k, err := s.Inspect(ctx, "a"); err != nil || k.State != keystore.Done || string(k.Result) != "ra" {
			t.Fatalf("Inspect a: %+v %v", k, err)
		}
		keys, _, err := s.List(ctx, keystore.ListOptions{})
		if err != nil || len(keys) != 1 || keys[0].Key != "a" {
			t.Fatalf("List: %+v %v", keys, err)
		}
		// Once a's result has expired, b may take the row; it is b's
		// first lease, not a takeover, and a now collides with b.
		time.Sleep(400 * time.Millisecond)
		b, err := s.Reserve(ctx, "b", nil, time.Minute)
		if err != nil || b.State != keystore.Acquired || b.Takeover {
			t.Fatalf("Reserve b after a expired: %+v %v, want acquired, no takeover", b, err)
		}
		if c, err := s.Reserve(ctx, "a", nil, time.Minute); !errors.Is(err, sqlstore.ErrDigestCollision) {
			t.Fatalf("Reserve a while b is live: %+v %v", c, err)
		}
		if k, err := s.Inspect(ctx, "b"); err != nil || k.State != keystore.InProgress || k.Token != b.Token {
			t.Fatalf("Inspect b: %+v %v", k, err)
		}
	})
}

// List pages by digest: every key of the scope once, none of another
// scope's, and a cursor that List did not return is refused.
func TestListDigestPages(t *testing.T) {
	eachDialect(t, func(t *testing.T, d sqldialect.Dialect, db *sql.DB) {
		ctx := context.Background()
		s := newStore(t, db, d)
		other, err := s.Scope("a") // "a" < "default" and a prefix of nothing
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]bool{}
		for i := range 23 {
			k := fmt.Sprintf("k%02d", i)
			want[k] = true
			if _, err := s.Reserve(ctx, k, nil, time.Minute); err != nil {
				t.Fatal(err)
			}
			if _, err := other.Reserve(ctx, "o"+k, nil, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		got := map[string]bool{}
		after := ""
		for range 30 {
			keys, next, err := s.List(ctx, keystore.ListOptions{After: after, Limit: 4})
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				if got[k.Key] || !want[k.Key] {
					t.Fatalf("List returned %q twice or from another scope", k.Key)
				}
				got[k.Key] = true
			}
			if after = next; after == "" {
				break
			}
		}
		if len(got) != len(want) {
			t.Fatalf("List found %d keys, want %d", len(got), len(want))
		}
		for _, bad := range []string{"zz", "k01", "00"} {
			if _, _, err := s.List(ctx, keystore.ListOptions{After: bad}); !errors.Is(err, idem.ErrInvalidArgument) {
				t.Fatalf("List after %q: %v, want ErrInvalidArgument", bad, err)
			}
		}
		if keys, next, err := s.List(ctx, keystore.ListOptions{After: "ffffffffffffffffffffffffffffffff"}); err != nil || len(keys) != 0 || next != "" {
			t.Fatalf("List after the last digest: %v %q %v", keys, next, err)
		}
	})
}

// MigrateLayout keeps every visible row exactly (state, token, result,
// fingerprint, expiry), drops expired results, keeps tokens increasing,
// and a second call does nothing.
func TestMigrateLayout(t *testing.T) {
	eachDialect(t, func(t *testing.T, d sqldialect.Dialect, db *sql.DB) {
		ctx := context.Background()
		oldTable(t, db, d, sqlstore.DefaultTable)
		s := newStore(t, db, d)
		wantLayout(t, s, sqlstore.LayoutRows)
		fp := []byte("fingerprint")
		inProgress, err := s.Reserve(ctx, "in-progress", fp, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 1200 { // more than a copy page
			c, err := s.Reserve(ctx, fmt.Sprintf("done-%d", i), nil, time.Minute)
			if err == nil {
				err = s.Complete(ctx, c, []byte(fmt.Sprint("result-", i)), time.Hour)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		gone, err := s.Reserve(ctx, "expired", nil, time.Minute)
		if err == nil {
			err = s.Complete(ctx, gone, nil, time.Millisecond)
		}
		if err != nil {
			t.Fatal(err)
		}
		before, err := s.Inspect(ctx, "in-progress")
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		for range 2 {
			if err := s.MigrateLayout(ctx); err != nil {
				t.Fatal(err)
			}
			wantLayout(t, s, sqlstore.LayoutDigest)
		}
		after, err := s.Inspect(ctx, "in-progress")
		if err != nil || after.Token != before.Token || !after.Expires.Equal(before.Expires) || after.Fingerprint != before.Fingerprint || after.State != keystore.InProgress {
			t.Fatalf("in-progress key after migration: %+v %v, was %+v", after, err, before)
		}
		if _, err := s.Reserve(ctx, "in-progress", []byte("other"), time.Minute); !errors.Is(err, idem.ErrFingerprintMismatch) {
			t.Fatalf("Reserve with another fingerprint: %v, want mismatch", err)
		}
		if err := s.Complete(ctx, inProgress, []byte("late"), time.Minute); err != nil {
			t.Fatalf("Complete of a claim taken before the migration: %v", err)
		}
		for _, i := range []int{0, 499, 500, 1199} {
			c, err := s.Reserve(ctx, fmt.Sprintf("done-%d", i), nil, time.Minute)
			if err != nil || c.State != keystore.Done || string(c.Result) != fmt.Sprint("result-", i) {
				t.Fatalf("done-%d after migration: %+v %v", i, c, err)
			}
		}
		if _, err := s.Inspect(ctx, "expired"); !errors.Is(err, keystore.ErrNotFound) {
			t.Fatalf("expired key after migration: %v", err)
		}
		c, err := s.Reserve(ctx, "new", nil, time.Minute)
		if err != nil || c.Token <= gone.Token {
			t.Fatalf("token after migration %d, last before %d (%v)", c.Token, gone.Token, err)
		}
		var rows int
		if err := db.QueryRow(`SELECT count(*) FROM ` + sqlstore.DefaultTable).Scan(&rows); err != nil || rows != 1202 {
			t.Fatalf("rows after migration: %d %v, want 1202", rows, err)
		}
	})
}

// MigrateLayout while two stores (two processes, both started on the rows
// layout) reserve and complete a pool of keys: no key is ever acquired
// twice, every result stays, and both stores end on the digest layout.
func TestMigrateLayoutConcurrent(t *testing.T) {
	eachDialect(t, func(t *testing.T, d sqldialect.Dialect, db *sql.DB) {
		ctx := context.Background()
		oldTable(t, db, d, sqlstore.DefaultTable)
		stores := []*sqlstore.Store{newStore(t, db, d), newStore(t, db, d)}
		for _, s := range stores {
			wantLayout(t, s, sqlstore.LayoutRows)
		}
		const keys = 300
		var (
			acquired [keys]atomic.Int32
			calls    atomic.Int64
			stop     atomic.Bool
			wg       sync.WaitGroup
			errs     = make(chan error, 16)
		)
		for w := range 8 {
			s := stores[w%2]
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(w), 1))
				for !stop.Load() {
					i := r.IntN(keys)
					key := fmt.Sprint("key-", i)
					c, err := s.Reserve(ctx, key, nil, time.Minute)
					calls.Add(1)
					switch {
					case err != nil:
						errs <- fmt.Errorf("Reserve %s: %w", key, err)
						return
					case c.State == keystore.Acquired:
						if acquired[i].Add(1) > 1 {
							errs <- fmt.Errorf("%s acquired twice (token %d)", key, c.Token)
							return
						}
						if err := s.Complete(ctx, c, []byte(key), time.Hour); err != nil {
							errs <- fmt.Errorf("Complete %s: %w", key, err)
							return
						}
					case c.State == keystore.Done && !bytes.Equal(c.Result, []byte(key)):
						errs <- fmt.Errorf("%s done with result %q", key, c.Result)
						return
					}
				}
			})
		}
		for calls.Load() < 200 {
			time.Sleep(time.Millisecond)
		}
		if err := stores[0].MigrateLayout(ctx); err != nil {
			t.Error(err)
		}
		at := calls.Load()
		for calls.Load() < at+400 && len(errs) == 0 {
			time.Sleep(time.Millisecond)
		}
		stop.Store(true)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		for _, s := range stores {
			wantLayout(t, s, sqlstore.LayoutDigest)
		}
		n := 0
		for i := range acquired {
			if acquired[i].Load() == 0 {
				continue
			}
			n++
			c, err := stores[1].Reserve(ctx, fmt.Sprint("key-", i), nil, time.Minute)
			if err != nil || c.State != keystore.Done {
				t.Fatalf("key-%d after the run: %+v %v, want done", i, c, err)
			}
		}
		t.Logf("%d calls, %d keys acquired, %d after the switch", calls.Load(), n, calls.Load()-at)
	})
}
