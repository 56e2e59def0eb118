package memstore

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/idem-go/idem/internal/compact"
)

// TestPendTableModel runs random inserts, removals, takeovers, samples and
// scans on a pending table beside a map, with fingerprints crowded into a
// few home slots so that probe runs are long, wrap around the table's end
// and are cut by deletions. After every step each key is found by its
// fingerprint, a key whose token hint nothing has overwritten is found by
// its token, and a token never leads to another key's slot.
func TestPendTableModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		sh := new(shard)
		tb := &sh.pending
		model := map[compact.FP]pend{}
		hinted := map[uint64]bool{} // tokens whose hint should still hold
		var next uint64 = 7         // tokens step by numShards, as a shard's do
		id := uint32(0)
		token := func() uint64 { next += numShards; return next }
		hint := func(tok uint64) {
			for old := range hinted {
				if tb.tokIdx(old) == tb.tokIdx(tok) {
					delete(hinted, old)
				}
			}
			hinted[tok] = true
		}
		pick := func(rt *rapid.T) (compact.FP, bool) {
			if len(model) == 0 {
				return compact.FP{}, false
			}
			fps := make([]compact.FP, 0, len(model))
			for fp := range model {
				fps = append(fps, fp)
			}
			// The key with the least Hi at or above a drawn one: map order
			// does not matter.
			want := rapid.Uint32Range(0, id).Draw(rt, "pick")
			best := fps[0]
			for _, fp := range fps {
				if fp.Hi >= want && (best.Hi < want || fp.Hi < best.Hi) {
					best = fp
				}
			}
			return best, true
		}
		steps := rapid.IntRange(1, 400).Draw(rt, "steps")
		for range steps {
			size := len(tb.slots)
			switch rapid.IntRange(0, 9).Draw(rt, "op") {
			case 0, 1, 2, 3: // insert
				id++
				// Homes crowd at the table's start or, complemented, its end.
				lo := rapid.Uint64Range(0, 20).Draw(rt, "home")
				if rapid.Bool().Draw(rt, "end") {
					lo = ^lo
				}
				fp := compact.FP{Lo: lo, Hi: id}
				p := pend{fp: fp, exp: rapid.Int64Range(1, 100).Draw(rt, "exp"), token: token(), key: "k"}
				j := tb.insert(p)
				if len(tb.slots) != size {
					clear(hinted)
				}
				if tb.slots[j] != p {
					rt.Fatalf("inserted at %d, slot holds %+v", j, tb.slots[j])
				}
				model[fp] = p
				hint(p.token)
			case 4, 5: // remove
				fp, ok := pick(rt)
				if !ok {
					continue
				}
				tb.remove(tb.find(fp))
				delete(hinted, model[fp].token)
				delete(model, fp)
			case 6: // takeover
				fp, ok := pick(rt)
				if !ok {
					continue
				}
				p := model[fp]
				delete(hinted, p.token)
				p.token, p.exp = token(), rapid.Int64Range(1, 100).Draw(rt, "exp")
				tb.retoken(tb.find(fp), p.token, p.exp, p.key, p.prefix)
				model[fp] = p
				hint(p.token)
			case 7: // sample
				now := rapid.Int64Range(0, 100).Draw(rt, "now")
				freed := sh.samplePending(now)
				gone := 0
				for fp, p := range model {
					if tb.find(fp) < 0 {
						if p.exp > now {
							rt.Fatalf("sample at %d deleted %+v", now, p)
						}
						delete(model, fp)
						delete(hinted, p.token)
						gone++
					}
				}
				if gone != freed {
					rt.Fatalf("sample freed %d, %d keys went", freed, gone)
				}
			case 8, 9: // scan
				now := rapid.Int64Range(0, 100).Draw(rt, "now")
				limit := rapid.IntRange(0, 10).Draw(rt, "limit")
				freed, least, complete := sh.scanPending(now, limit, 1<<62)
				expired, wantLeast := 0, int64(1<<62)
				for fp, p := range model {
					if p.exp <= now {
						expired++
						if tb.find(fp) < 0 {
							delete(model, fp)
							delete(hinted, p.token)
						}
					} else {
						wantLeast = min(wantLeast, p.exp)
					}
				}
				if freed != min(expired, limit) || complete != (expired <= limit) || complete && least != wantLeast {
					rt.Fatalf("scan at %d limit %d: freed %d least %d complete %v; %d expired, least %d", now, limit, freed, least, complete, expired, wantLeast)
				}
			}
			if len(tb.slots) != size {
				clear(hinted) // a resize rebuilds the hints in slot order
			}
			check(rt, tb, model, hinted)
		}
		for fp := range model {
			tb.remove(tb.find(fp))
		}
		if tb.n != 0 || len(tb.slots) > minPending {
			rt.Fatalf("emptied: n %d, %d slots, want 0 and %d", tb.n, len(tb.slots), minPending)
		}
	})
}

func check(rt *rapid.T, tb *pendTable, model map[compact.FP]pend, hinted map[uint64]bool) {
	if tb.n != len(model) {
		rt.Fatalf("n %d, model %d", tb.n, len(model))
	}
	if len(tb.slots) > minPending && tb.n*8 < len(tb.slots) || tb.n*4 > len(tb.slots)*3 {
		rt.Fatalf("%d keys in %d slots", tb.n, len(tb.slots))
	}
	for fp, p := range model {
		j := tb.find(fp)
		if j < 0 || tb.slots[j] != p {
			rt.Fatalf("find %+v: slot %d", p, j)
		}
		if k := tb.byToken(p.token); k >= 0 && k != j || hinted[p.token] && k != j {
			rt.Fatalf("byToken %d: slot %d, the key is at %d", p.token, k, j)
		}
	}
	for tok := range hinted {
		if tb.byToken(tok) < 0 {
			rt.Fatalf("token %d lost its hint", tok)
		}
	}
}

// TestAuxToken checks that a shard's compact-tier record of a token gives
// the token back for any token (its own, or one restored from an older
// snapshot, of any residue), and that its own successive tokens are
// recorded one apart, which the tier stores in a byte.
func TestAuxToken(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		sh := shard{idx: rapid.Uint64Range(0, numShards-1).Draw(rt, "idx"), tokens: rapid.Uint64().Draw(rt, "start") >> 1}
		tok := rapid.Uint64().Draw(rt, "token")
		if got := sh.token(sh.aux(tok)); got != tok {
			rt.Fatalf("shard %d: token %d recorded as %d, read back as %d", sh.idx, tok, sh.aux(tok), got)
		}
		a := sh.nextToken()
		b := sh.nextToken()
		if a%numShards != sh.idx || b-a != numShards || sh.aux(b)-sh.aux(a) != 1 || sh.token(sh.aux(b)) != b {
			rt.Fatalf("shard %d: tokens %d, %d recorded as %d, %d", sh.idx, a, b, sh.aux(a), sh.aux(b))
		}
	})
}
