package idemhttp

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// FuzzCanonicalJSON: whatever body the canonical fingerprint accepts has a
// canonical form that is itself canonical (a fixed point), means the same
// JSON as the body, and is what the body re-encoded by another encoder
// (encoding/json, indented, HTML-escaped, names in its own order)
// canonicalises to; whatever it refuses wraps ErrJSONBody. The input is
// bounded (64 KiB; the middleware bounds bodies by WithMaxRequestBody) and
// so is the nesting (MaxJSONDepth).
func FuzzCanonicalJSON(f *testing.F) {
	for _, s := range []string{
		`{"b":1,"a":[true,false,null],"c":{"z":"\u00e9","y":"<&>"}}`,
		`[1e21, 1e-7, 0.1, -0, 123456789012, 4.5, 2e-3]`,
		`{"\ud83d\ude00":1,"\u20ac":2,"a":3}`,
		`"\u0000\u001f\"\\/"`,
		`{"a":1,"a":2}`, `9007199254740993`, `{"a":"\udc00"}`,
		strings.Repeat("[", 70) + strings.Repeat("]", 70),
		`{} []`, "",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) > 64<<10 {
			return // the fuzzer's input bound: larger bodies are covered by the size limit's tests
		}
		b := &jsonBody{raw: raw}
		c, err := b.canonical()
		if err != nil {
			if !errors.Is(err, ErrJSONBody) {
				t.Fatalf("%q: error %v does not wrap ErrJSONBody", raw, err)
			}
			return
		}
		again, err := (&jsonBody{raw: c}).canonical()
		if err != nil || !bytes.Equal(again, c) {
			t.Fatalf("not a fixed point: %q -> %q -> %q (%v)", raw, c, again, err)
		}
		var v, w any
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatalf("accepted %q that encoding/json refuses: %v", raw, err)
		}
		if err := json.Unmarshal(c, &w); err != nil || !reflect.DeepEqual(v, w) {
			t.Fatalf("canonical form means other JSON: %q -> %q (%v)", raw, c, err)
		}
		other, err := json.MarshalIndent(v, "", "\t")
		if err != nil {
			t.Fatal(err)
		}
		oc, err := (&jsonBody{raw: other}).canonical()
		if err != nil || !bytes.Equal(oc, c) {
			t.Fatalf("re-encoded differs: %q -> %q, re-encoded %q -> %q (%v)", raw, c, other, oc, err)
		}
	})
}
