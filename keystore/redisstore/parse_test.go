package redisstore

import "testing"

// FuzzParseReserve feeds the reply parser replies of every shape: it must
// accept exactly the well-formed ones and never panic.
func FuzzParseReserve(f *testing.F) {
	f.Add(int64(0), int64(7), int64(1700000000000), "", int64(1), uint8(5), uint8(0))
	f.Add(int64(2), int64(0), int64(1700000000000), "result", int64(0), uint8(5), uint8(0))
	f.Add(int64(9), int64(0), int64(0), "", int64(0), uint8(4), uint8(3))
	f.Fuzz(func(t *testing.T, code, token, exp int64, result string, takeover int64, n, wrong uint8) {
		v := []any{code, token, exp, result, takeover}
		if int(wrong) < len(v) {
			v[wrong] = "not the right type"
			if wrong == 3 {
				v[wrong] = int64(3)
			}
		}
		v = v[:min(int(n), len(v))]
		c, tok, e, r, to, err := parseReserve(v)
		wellFormed := len(v) == 5 && int(wrong) >= 5 && code >= 0 && code <= 3
		if wellFormed != (err == nil) {
			t.Fatalf("parseReserve(%v): err %v, well-formed %v", v, err, wellFormed)
		}
		if err == nil && (c != code || tok != token || e != exp || r != result || to != takeover) {
			t.Fatalf("parseReserve(%v) = %v %v %v %q %v", v, c, tok, e, r, to)
		}
	})
}
