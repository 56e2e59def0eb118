package idemhttp_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idem-go/idem/idemhttp"
)

// TestBodyFingerprint: under CanonicalJSON a re-encoded retry is a replay
// (under RawBody, as before, it is 422); under JSONFields a change outside
// the selection is a replay and inside it a 422.
func TestBodyFingerprint(t *testing.T) {
	t.Parallel()
	const (
		first     = `{"amount":1000,"currency":"eur","customer":{"id":"cus_1","name":"Zoë"},"note":"<a&b>"}`
		reencoded = "{\n  \"note\": \"\\u003ca\\u0026b>\",\n  \"customer\": {\"name\": \"Zo\\u00eb\", \"id\": \"cus_1\"},\n  \"currency\": \"eur\",\n  \"amount\": 1.0E3\n}"
		otherNote = `{"amount":1000,"currency":"eur","customer":{"id":"cus_1","name":"Zoë"},"note":"retried at 12:01"}`
		otherCus  = `{"amount":1000,"currency":"eur","customer":{"id":"cus_2","name":"Zoë"},"note":"<a&b>"}`
	)
	for _, c := range []struct {
		name                         string
		fp                           idemhttp.BodyFingerprint
		reencoded, otherNote, otherC int
	}{
		{"raw", idemhttp.RawBody(), 422, 422, 422},
		{"json", idemhttp.CanonicalJSON(), 200, 422, 422},
		{"fields", idemhttp.JSONFields("amount", "currency", "customer.id"), 200, 200, 422},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEventServer(t, idemhttp.WithBodyFingerprint(c.fp))
			k := func(body, key string) sent { return e.send(body, idemhttp.HeaderKey, key) }
			k(first, "k1")
			for _, s := range []struct {
				body string
				want int
			}{{reencoded, c.reencoded}, {otherNote, c.otherNote}, {otherCus, c.otherC}} {
				got := k(s.body, "k1")
				if got.status != s.want || (s.want == 200 && got.header.Get("Idempotent-Replayed") != "true") {
					t.Errorf("%q: %d %s, want %d", s.body, got.status, got.body, s.want)
				}
			}
			if n := e.effects.Load(); n != 1 {
				t.Fatalf("effects %d, want 1", n)
			}
			if c.name == "raw" {
				return
			}
			for _, bad := range []string{
				strings.Repeat(`{"a":`, 65) + "1" + strings.Repeat("}", 65),
				`{"amount":9007199254740993}`,
				`{"a":1,"a":2}`,
				`{"a":"\ud800"}`,
				`{"a":1} {"b":2}`,
				"not json",
				"{\"a\":\"\xff\"}",
			} {
				if s := k(bad, "bad"); s.status != 400 || sentProblem(t, s) != "invalid-json-body" {
					t.Errorf("%.40q: %d %s, want 400 invalid-json-body", bad, s.status, s.body)
				}
			}
			if s := k(strings.Repeat("[", 64)+strings.Repeat("]", 64), "deep64"); s.status != 200 {
				t.Errorf("64 levels: %d %s", s.status, s.body)
			}
			if s := k("", "empty"); s.status != 200 {
				t.Errorf("empty body: %d %s", s.status, s.body)
			}
		})
	}
}

// TestStore4xx: 4xx answers are stored by default; WithStore4xx(false)
// releases the key so that the retry executes, and still stores a 2xx.
func TestStore4xx(t *testing.T) {
	t.Parallel()
	for _, store := range []bool{true, false} {
		e := newEventServer(t, idemhttp.WithStore4xx(store))
		e.status = http.StatusNotFound
		a, b := e.send("x", idemhttp.HeaderKey, "k"), e.send("x", idemhttp.HeaderKey, "k")
		wantExecs := int32(1)
		if !store {
			wantExecs = 2
		}
		if a.status != 404 || b.status != 404 || (b.header.Get("Idempotent-Replayed") == "true") != store || e.effects.Load() != wantExecs {
			t.Fatalf("store4xx %v: %+v then %+v, effects %d", store, a, b, e.effects.Load())
		}
		e.status = http.StatusCreated
		e.send("x", idemhttp.HeaderKey, "k2")
		if s := e.send("x", idemhttp.HeaderKey, "k2"); s.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("store4xx %v: a 201 was not stored", store)
		}
	}
}
