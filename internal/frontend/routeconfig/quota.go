package routeconfig

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/idem-go/idem/idemhttp"
)

// Quota is a route's quota as written (idem serve's quota: mapping, the
// Caddyfile's quota subdirective, the Caddy JSON's quota object): key
// counts as whole numbers, byte bounds as sizes ("10MiB", "1GB",
// "1048576"). An empty field is unbounded. See [idemhttp.Quota].
type Quota struct {
	PrincipalKeys  string
	PrincipalBytes string
	Keys           string
	Bytes          string
}

// QuotaFields are the quota's field names as a configuration writes them,
// in the order of [Quota]'s fields.
var QuotaFields = []string{"principal-keys", "principal-bytes", "keys", "bytes"}

// ParseQuotaWords reads a quota written as name value pairs
// ("principal-keys 100 bytes 1GiB"), as the Caddyfile's quota subdirective
// writes it; sep is the word separator the front end writes its names
// with ("-" or "_"). The values are checked by [Check].
func ParseQuotaWords(words []string, sep string) (Quota, error) {
	var q Quota
	if len(words) == 0 || len(words)%2 != 0 {
		return q, fmt.Errorf("want name value pairs, such as principal%[1]skeys 100 principal%[1]sbytes 10MiB keys 10000 bytes 1GiB", sep)
	}
	seen := map[string]bool{}
	for i := 0; i < len(words); i += 2 {
		name, v := strings.ReplaceAll(words[i], sep, "-"), words[i+1]
		if seen[name] {
			return q, fmt.Errorf("%s given twice", words[i])
		}
		seen[name] = true
		switch name {
		case "principal-keys":
			q.PrincipalKeys = v
		case "principal-bytes":
			q.PrincipalBytes = v
		case "keys":
			q.Keys = v
		case "bytes":
			q.Bytes = v
		default:
			return q, fmt.Errorf("unknown field %q: want %s", words[i], strings.ReplaceAll(strings.Join(QuotaFields, ", "), "-", sep))
		}
	}
	return q, nil
}

// checkQuota turns q into idemhttp's Quota, naming each bad field
// ("quota.principal-bytes").
func checkQuota(q Quota, bad func(field, format string, args ...any)) (idemhttp.Quota, bool) {
	var out idemhttp.Quota
	ok := true
	count := func(name, v string, to *int) {
		if v == "" {
			return
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		switch {
		case err != nil:
			ok = false
			bad("quota."+name, "%q is not a whole number of keys (write a count such as 1000)", v)
		case n < 0:
			ok = false
			bad("quota."+name, "%d must not be negative (omit it for no bound)", n)
		default:
			*to = int(min(n, math.MaxInt32))
		}
	}
	size := func(name, v string, to *int64) {
		if v == "" {
			return
		}
		n, err := ParseSize(v)
		if err != nil {
			ok = false
			bad("quota."+name, "%v", err)
			return
		}
		*to = n
	}
	count("principal-keys", q.PrincipalKeys, &out.PrincipalKeys)
	size("principal-bytes", q.PrincipalBytes, &out.PrincipalBytes)
	count("keys", q.Keys, &out.Keys)
	size("bytes", q.Bytes, &out.Bytes)
	if ok && out.PrincipalKeys == 0 && out.Keys == 0 {
		ok = false
		bad("quota", "set principal-keys or keys (or both): the accounting holds memory for each key it counts, so the keys must be bounded")
	}
	return out, ok
}

// sizeUnits are the units [ParseSize] takes, by their lower-case name.
var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"k": 1e3, "kb": 1e3, "kib": 1 << 10,
	"m": 1e6, "mb": 1e6, "mib": 1 << 20,
	"g": 1e9, "gb": 1e9, "gib": 1 << 30,
	"t": 1e12, "tb": 1e12, "tib": 1 << 40,
}

// maxSize is the largest size ParseSize accepts (1 PiB).
const maxSize = 1 << 50

// ParseSize reads a byte size: a whole number with an optional unit (B,
// KB, MB, GB, TB in powers of 1000; KiB, MiB, GiB, TiB in powers of 1024;
// any case, with or without a space): "64MiB", "1 GB", "1048576". Zero
// and sizes above 1 PiB are refused.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	if i == 0 || i > 16 {
		if strings.HasPrefix(t, "-") {
			return 0, fmt.Errorf("%q must not be negative (want a size such as 64MiB)", s)
		}
		return 0, fmt.Errorf("%q is not a size (want a whole number with an optional unit, such as 64MiB, 1GB or 1048576)", s)
	}
	n, _ := strconv.ParseInt(t[:i], 10, 64)
	unit, ok := sizeUnits[strings.ToLower(strings.TrimSpace(t[i:]))]
	switch {
	case !ok:
		return 0, fmt.Errorf("%q: unknown unit %q (want B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)", s, strings.TrimSpace(t[i:]))
	case n == 0:
		return 0, fmt.Errorf("%q must be positive (omit it for no bound)", s)
	case n > maxSize/unit:
		return 0, fmt.Errorf("%q is above the largest size, 1 PiB", s)
	}
	return n * unit, nil
}
