package routeconfig

import (
	"strings"
	"testing"

	"github.com/idem-go/idem/idemhttp"
)

func TestCheckQuota(t *testing.T) {
	t.Parallel()
	s, errs := Check(Route{Quota: &Quota{PrincipalKeys: "100", PrincipalBytes: "10MiB", Keys: "10000", Bytes: "1GB"}})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	want := idemhttp.Quota{PrincipalKeys: 100, PrincipalBytes: 10 << 20, Keys: 10000, Bytes: 1e9}
	if s.Quota == nil || *s.Quota != want {
		t.Fatalf("quota = %+v, want %+v", s.Quota, want)
	}
	if len(s.Options()) != 1 {
		t.Errorf("options: %d, want WithQuota alone", len(s.Options()))
	}
	for _, tc := range []struct {
		q           Quota
		field, want string
	}{
		{Quota{PrincipalKeys: "-1"}, "quota.principal-keys", "must not be negative"},
		{Quota{PrincipalKeys: "ten"}, "quota.principal-keys", "not a whole number"},
		{Quota{Keys: "10", Bytes: "10XB"}, "quota.bytes", `unknown unit "XB"`},
		{Quota{Keys: "10", PrincipalBytes: "-5MiB"}, "quota.principal-bytes", "must not be negative"},
		{Quota{Keys: "10", Bytes: "0"}, "quota.bytes", "must be positive"},
		{Quota{Bytes: "1GiB"}, "quota", "set principal-keys or keys"},
	} {
		_, errs := Check(Route{Quota: &tc.q})
		if len(errs) != 1 || errs[0].Field != tc.field || !strings.Contains(errs[0].Problem, tc.want) {
			t.Errorf("Check(quota %+v) = %v; want one %s error saying %q", tc.q, errs, tc.field, tc.want)
		}
	}
}

func TestParseQuotaWords(t *testing.T) {
	t.Parallel()
	q, err := ParseQuotaWords(strings.Fields("principal_keys 100 principal_bytes 10MiB keys 10000 bytes 1GiB"), "_")
	if err != nil || q != (Quota{"100", "10MiB", "10000", "1GiB"}) {
		t.Fatalf("ParseQuotaWords = %+v, %v", q, err)
	}
	for _, words := range []string{"", "keys", "keys 1 keys 2"} {
		if _, err := ParseQuotaWords(strings.Fields(words), "_"); err == nil {
			t.Errorf("ParseQuotaWords(%q) accepted", words)
		}
	}
	if _, err := ParseQuotaWords([]string{"pages", "1"}, "_"); err == nil || !strings.Contains(err.Error(), "principal_keys, principal_bytes, keys, bytes") {
		t.Errorf("unknown field: %v", err)
	}
}

func TestParseSize(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{"64MiB": 64 << 20, "1 GB": 1e9, "1048576": 1 << 20, "2kib": 2048, "3b": 3, "1TiB": 1 << 40} {
		if n, err := ParseSize(in); err != nil || n != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, n, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "0", "-1", "1.5GiB", "12 parsecs", "2000TiB", "99999999999999999999"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) accepted", in)
		}
	}
}

// FuzzParseSize: any input is an error or a positive size at most 1 PiB.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"64MiB", "1 GB", "0", "-1", "1e9", "9223372036854775807", "1TiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 64 {
			return
		}
		n, err := ParseSize(s)
		if err == nil && (n <= 0 || n > maxSize) {
			t.Fatalf("ParseSize(%q) = %d", s, n)
		}
	})
}
