package memstore

import (
	"fmt"
	"testing"
	"unsafe"

	"github.com/idem-go/idem/internal/compact"
)

// TestTableCollisions puts keys that share a fingerprint (which a keyed
// 96-bit hash makes about 2⁻⁹⁶ likely, forced here) beside keys that do
// not, across several pages, and checks each key finds its own entry
// through adds, removals in every order and reused slots, against a map.
func TestTableCollisions(t *testing.T) {
	tb := newTable()
	model := map[string]uint64{} // key (in scope "\x00") -> token
	fpOf := func(k string) compact.FP {
		var n int
		_, _ = fmt.Sscanf(k, "k%d", &n)
		return compact.FP{Lo: uint64(n % 7), Hi: 1} // 7 fingerprints for all keys
	}
	check := func(step string) {
		t.Helper()
		for k, token := range model {
			i, ok := tb.find(fpOf(k), "\x00", k)
			if !ok || tb.at(i).key() != "\x00"+k || tb.at(i).token != token {
				t.Fatalf("%s: %s not found as itself (ok=%v)", step, k, ok)
			}
			if j, ok := tb.find(fpOf(k), "", "\x00"+k); !ok || j != i {
				t.Fatalf("%s: %s not found by its whole internal key", step, k)
			}
			if _, ok := tb.find(fpOf(k), "\x01", k); ok {
				t.Fatalf("%s: %s found in another scope", step, k)
			}
		}
		for n := 2000; n < 2010; n++ {
			k := fmt.Sprintf("k%d", n)
			if _, ok := tb.find(fpOf(k), "\x00", k); ok {
				t.Fatalf("%s: absent %s found", step, k)
			}
		}
		seen := 0
		for i := range tb.all {
			if _, ok := model[tb.at(i).key()[1:]]; !ok {
				t.Fatalf("%s: all yields %q, not in the table", step, tb.at(i).key())
			}
			seen++
		}
		if seen != len(model) {
			t.Fatalf("%s: all yields %d entries, want %d", step, seen, len(model))
		}
	}
	add := func(n int) {
		k := fmt.Sprintf("k%d", n)
		tb.add(newEntry("\x00", k, fpOf(k), "fp", []byte("result"), 1, uint64(n), stDone))
		model[k] = uint64(n)
	}
	remove := func(n int) {
		k := fmt.Sprintf("k%d", n)
		i, ok := tb.find(fpOf(k), "\x00", k)
		if !ok {
			t.Fatalf("remove: %s not found", k)
		}
		tb.remove(i)
		delete(model, k)
	}
	for n := range 1200 { // three pages
		add(n)
	}
	if len(tb.coll) == 0 || len(tb.pages) != 3 {
		t.Fatalf("%d colliding keys, %d pages: the test does not exercise collisions across pages", len(tb.coll), len(tb.pages))
	}
	check("added")
	for n := 0; n < 1200; n += 3 { // the index's holders and colliding keys alike
		remove(n)
	}
	check("removed a third")
	for n := 1200; n < 1600; n++ { // reuses the freed slots, then a new page
		add(n)
	}
	check("added again")
	for n := range 1600 {
		if _, ok := model[fmt.Sprintf("k%d", n)]; ok {
			remove(n)
		}
	}
	check("removed all")
	if len(tb.index) != 0 || len(tb.coll) != 0 {
		t.Fatalf("empty table holds %d indexed and %d colliding keys", len(tb.index), len(tb.coll))
	}
}

// TestEntryLayout pins what the map tier costs a key: a 48-byte entry
// (on 64-bit platforms) with its key, fingerprint and result in one string.
func TestEntryLayout(t *testing.T) {
	if n, want := unsafe.Sizeof(entry{}), 32+unsafe.Sizeof(""); n != want {
		t.Fatalf("entry is %d bytes, want %d (a string and 32 bytes)", n, want)
	}
	e := newEntry("\x00", "key", compact.FP{Lo: 1, Hi: 2}, []byte("fp"), []byte("result"), 5, 6, stDone)
	if e.key() != "\x00key" || e.fp() != "fp" || string(e.result()) != "result" || e.value() != "fpresult" || e.size() != 8 || e.kfp() != (compact.FP{Lo: 1, Hi: 2}) {
		t.Fatalf("entry reads back key %q fp %q result %q size %d kfp %v", e.key(), e.fp(), e.result(), e.size(), e.kfp())
	}
	if a := testing.AllocsPerRun(100, func() {
		_ = newEntry("\x00", "a-key-longer-than-thirty-two-bytes-0000", compact.FP{}, []byte("fp"), []byte("result"), 5, 6, stDone)
	}); a > 1 {
		t.Fatalf("newEntry allocates %v times, want 1", a)
	}
}
