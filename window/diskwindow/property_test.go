package diskwindow

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestProperty runs random adds, batches, seals, clock steps, restarts
// and damaged files against a map of first accepts: an id first accepted
// less than the horizon ago must be a duplicate, one accepted at least
// horizon + horizon/k ago must be new, and a damaged file must be refused
// by name.
func TestProperty(t *testing.T) {
	t.Parallel()
	const w = 10 * time.Minute
	const k = 5
	rapid.Check(t, func(rt *rapid.T) {
		dir := t.TempDir()
		opts := []Option{WithGenerations(k), WithMaxOpen(rapid.IntRange(1, 20).Draw(rt, "maxOpen"))}
		if rapid.Bool().Draw(rt, "withoutAdvise") {
			opts = append(opts, withoutAdvise())
		}
		s, err := Open(dir, w, opts...)
		if err != nil {
			rt.Fatal(err)
		}
		defer func() { s.Close() }()
		first := map[string]time.Time{}
		now := t0
		key := func(scope, id string) string { return scope + "\x00" + id }
		check := func(scope, id string, dup bool) {
			f, seen := first[key(scope, id)]
			age := now.Sub(f)
			switch {
			case seen && age < w && !dup:
				rt.Fatalf("%s/%s first accepted %v ago answered new", scope, id, age)
			case (!seen || age >= w+w/k) && dup:
				rt.Fatalf("%s/%s (seen %v, %v ago) answered duplicate", scope, id, seen, age)
			}
			if !dup {
				first[key(scope, id)] = now
			}
		}
		ids := rapid.SampledFrom([]string{"a", "b", "c", "d", "e", "f", "g", "h", "0f8fad5b-d9cb-469f-a165-70867728950e"})
		scopes := rapid.SampledFrom([]string{"", "s"})
		rt.Repeat(map[string]func(*rapid.T){
			"add": func(rt *rapid.T) {
				scope, id := scopes.Draw(rt, "scope"), ids.Draw(rt, "id")
				dup, err := s.Add(context.Background(), scope, id, now)
				if err != nil {
					rt.Fatal(err)
				}
				check(scope, id, dup)
			},
			"batch": func(rt *rapid.T) {
				scope := scopes.Draw(rt, "scope")
				batch := rapid.SliceOfN(ids, 1, 6).Draw(rt, "ids")
				dups, err := s.AddBatch(context.Background(), scope, batch, now, nil)
				if err != nil {
					rt.Fatal(err)
				}
				for i, id := range batch {
					check(scope, id, dups[i])
				}
			},
			"seen": func(rt *rapid.T) { // answers as Add would, records nothing
				scope := scopes.Draw(rt, "scope")
				batch := rapid.SliceOfN(ids, 1, 6).Draw(rt, "ids")
				dups, err := s.SeenBatch(context.Background(), scope, batch, now, nil)
				if err != nil {
					rt.Fatal(err)
				}
				saved := maps.Clone(first)
				for i, id := range batch {
					check(scope, id, dups[i])
					first = maps.Clone(saved) // a repeat within the batch is answered the same
				}
			},
			"tick": func(rt *rapid.T) {
				now = now.Add(rapid.SampledFrom([]time.Duration{0, time.Second, 30 * time.Second, 59 * time.Second,
					time.Minute, 2 * time.Minute, 5 * time.Minute, w - time.Second, w}).Draw(rt, "d"))
			},
			"seal": func(rt *rapid.T) {
				if err := s.Seal(); err != nil {
					rt.Fatal(err)
				}
			},
			"restart": func(rt *rapid.T) {
				if err := s.Close(); err != nil {
					rt.Fatal(err)
				}
				if s, err = Open(dir, w, opts...); err != nil {
					rt.Fatal(err)
				}
			},
			"damage": func(rt *rapid.T) {
				if err := s.Close(); err != nil {
					rt.Fatal(err)
				}
				files, _ := filepath.Glob(filepath.Join(dir, "*.edf"))
				if len(files) == 0 {
					if s, err = Open(dir, w, opts...); err != nil {
						rt.Fatal(err)
					}
					return // nothing sealed to damage yet: this step was a restart
				}
				victim := rapid.SampledFrom(files).Draw(rt, "file")
				b, err := os.ReadFile(victim)
				if err != nil {
					rt.Fatal(err)
				}
				off := rapid.IntRange(0, len(b)-1).Draw(rt, "offset")
				bit := byte(1) << rapid.IntRange(0, 7).Draw(rt, "bit")
				b[off] ^= bit
				os.WriteFile(victim, b, 0o600)
				// Without merges: one would rewrite what the test restores.
				damaged, err := Open(dir, w, append(opts, WithVerify(), withoutMerge())...)
				if err == nil {
					damaged.Close() // the flip was in padding; release the directory
				}
				var ce *CorruptError
				padding := off >= int(newLayoutOf(b).metaLen) && off < int(newLayoutOf(b).lowOff)
				if !padding && (!errors.As(err, &ce) || ce.File != victim) {
					rt.Fatalf("byte %d of %s flipped: Open: %v", off, victim, err)
				}
				b[off] ^= bit
				os.WriteFile(victim, b, 0o600)
				if s, err = Open(dir, w, opts...); err != nil {
					rt.Fatal(err)
				}
			},
		})
	})
}

// newLayoutOf is the layout a generation file's header claims.
func newLayoutOf(b []byte) layout {
	var n uint64
	for i := 7; i >= 0; i-- {
		n = n<<8 | uint64(b[24+i])
	}
	return newLayout(n, uint(b[12]), uint(b[14]), int(b[15]))
}

func ExampleSet() {
	dir, err := os.MkdirTemp("", "diskwindow")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	// One set per partition, with the horizon duplicates can arrive in.
	s, err := Open(filepath.Join(dir, "orders-0"), 24*time.Hour)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	now := time.Now()
	dups, err := s.AddBatch(ctx, "orders", []string{"m-1", "m-2", "m-1"}, now, nil)
	if err != nil {
		panic(err) // fail closed: process nothing, acknowledge nothing
	}
	fmt.Println(dups) // on disk now: acknowledge the new ones after processing
	s.Close()

	// After a restart (or kill -9) the ids are still duplicates.
	s, err = Open(filepath.Join(dir, "orders-0"), 24*time.Hour)
	if err != nil {
		panic(err)
	}
	defer s.Close()
	dup, err := s.Add(ctx, "orders", "m-2", now.Add(time.Minute))
	fmt.Println(dup, err)
	// Output:
	// [false false true]
	// true <nil>
}
