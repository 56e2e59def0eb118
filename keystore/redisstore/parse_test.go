package redisstore

import (
	"fmt"
	"testing"
)

// FuzzParseReserve feeds the reply parser arbitrary strings: it must accept
// exactly the well-formed replies, return their fields, and never panic.
func FuzzParseReserve(f *testing.F) {
	f.Add("0 7 1700000000000 1 ")
	f.Add("2 0 1700000000000 0 result with spaces")
	f.Add("3 0 1700000000000 0 ")
	f.Add("9 0 0 0 ")
	f.Add("0 7 1700000000000 0")
	f.Add("1 0 x 0 ")
	f.Fuzz(func(t *testing.T, v string) {
		code, tok, e, r, to, err := parseReserve(v)
		if err != nil {
			return
		}
		if code < 0 || code > 3 || to < 0 || to > 1 || (r != "" && code != 2) {
			t.Fatalf("parseReserve(%q) accepted code %d takeover %d result %q", v, code, to, r)
		}
		// Accepted replies print back to a string that parses the same.
		again := fmt.Sprintf("%d %d %d %d %s", code, tok, e, to, r)
		c2, t2, e2, r2, to2, err := parseReserve(again)
		if err != nil || c2 != code || t2 != tok || e2 != e || r2 != r || to2 != to {
			t.Fatalf("parseReserve(%q) = %d %d %d %q %d, reparse of %q differs (%v)", v, code, tok, e, r, to, again, err)
		}
	})
}

func TestParseReserve(t *testing.T) {
	code, tok, e, r, to, err := parseReserve("2 0 1700000000000 0 a b ")
	if err != nil || code != 2 || tok != 0 || e != 1700000000000 || r != "a b " || to != 0 {
		t.Fatalf("parseReserve = %d %d %d %q %d %v", code, tok, e, r, to, err)
	}
	for _, bad := range []string{"", "0 1 2", "0 1 2 3 ", "4 0 0 0 ", "0 1 2 0 extra", "a 1 2 0 ", "0 1 2 0"} {
		if _, _, _, _, _, err := parseReserve(bad); err == nil {
			t.Errorf("parseReserve(%q) accepted", bad)
		}
	}
}
