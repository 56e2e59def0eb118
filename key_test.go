package idem_test

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/idem-go/idem"
)

var uuidV5 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestDeriveKeyDeterministic(t *testing.T) {
	t.Parallel()
	a, err := idem.DeriveKey("payments.capture", "order-42", "1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := idem.DeriveKey("payments.capture", "order-42", "1")
	if a != b {
		t.Fatalf("same fields gave %q and %q", a, b)
	}
	if !uuidV5.MatchString(a) {
		t.Fatalf("%q is not a canonical version-5 UUID", a)
	}
}

func TestDeriveKeyDistinguishes(t *testing.T) {
	t.Parallel()
	cases := [][]string{
		{"ns", "ab", "c"},
		{"ns", "a", "bc"},
		{"ns", "c", "ab"},
		{"ns", "abc"},
		{"other", "ab", "c"},
		{"ns", "ab", "c", ""},
		{"nsab", "c"},
	}
	seen := map[string][]string{}
	for _, c := range cases {
		k, err := idem.DeriveKey(c[0], c[1:]...)
		if err != nil {
			t.Fatal(err)
		}
		if prev, ok := seen[k]; ok {
			t.Fatalf("%q and %q derive the same key %s", prev, c, k)
		}
		seen[k] = c
	}
}

func TestDeriveKeyRejects(t *testing.T) {
	t.Parallel()
	if _, err := idem.DeriveKey(""); !errors.Is(err, idem.ErrInvalidKey) {
		t.Fatalf("empty namespace: got %v", err)
	}
	if _, err := idem.DeriveKey("ns"); !errors.Is(err, idem.ErrInvalidKey) {
		t.Fatalf("no fields: got %v", err)
	}
}

func TestValidateKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		key  string
		want string
	}{
		{"", "empty"},
		{strings.Repeat("k", 256), "256 bytes"},
		{"evt\x00-1", "NUL byte at 3"},
		{"\x00", "NUL byte at 0"},
		{"ab\xff", "not valid UTF-8 (byte 2)"},
		{"\xc3\x28", "not valid UTF-8 (byte 0)"},
		{string([]byte{0x6b, 0xed, 0xa0, 0x80}), "not valid UTF-8 (byte 1)"}, // a UTF-16 surrogate
	} {
		err := idem.ValidateKey(tc.key)
		if !errors.Is(err, idem.ErrInvalidKey) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ValidateKey(len %d) = %v, want ErrInvalidKey naming %q", len(tc.key), err, tc.want)
		}
	}
	for _, ok := range []string{"evt-1", "ключ-1", "\uFFFD", "tab\there", strings.Repeat("é", 127)} {
		if err := idem.ValidateKey(ok); err != nil {
			t.Errorf("ValidateKey(%q) = %v, want nil", ok, err)
		}
	}
	if err := idem.ValidateKey(strings.Repeat("k", 255)); err != nil {
		t.Errorf("255-byte key rejected: %v", err)
	}
}

func TestPermanent(t *testing.T) {
	t.Parallel()
	base := errors.New("bad payload")
	err := fmt.Errorf("handler: %w", idem.Permanent(base))
	if !idem.IsPermanent(err) || !errors.Is(err, base) {
		t.Fatalf("Permanent lost its mark or its cause: %v", err)
	}
	if idem.IsPermanent(base) || idem.Permanent(nil) != nil {
		t.Fatal("unmarked error reported permanent, or Permanent(nil) != nil")
	}
}

func ExampleDeriveKey() {
	// Every retry of "capture order 42, attempt group 1" carries this key.
	key, err := idem.DeriveKey("payments.capture", "order-42")
	if err != nil {
		panic(err)
	}
	again, _ := idem.DeriveKey("payments.capture", "order-42")
	fmt.Println(len(key), key == again)
	// Output: 36 true
}

func TestFingerprintRules(t *testing.T) {
	if err := idem.ValidateFingerprint(make([]byte, idem.MaxFingerprintLen)); err != nil {
		t.Fatalf("fingerprint at the limit: %v", err)
	}
	if err := idem.ValidateFingerprint(make([]byte, idem.MaxFingerprintLen+1)); !errors.Is(err, idem.ErrInvalidArgument) {
		t.Fatalf("oversized fingerprint: %v, want ErrInvalidArgument", err)
	}
	for _, c := range []struct {
		stored, got string
		want        bool
	}{{"", "", false}, {"a", "", false}, {"", "a", false}, {"a", "a", false}, {"a", "b", true}} {
		if got := idem.FingerprintsConflict([]byte(c.stored), []byte(c.got)); got != c.want {
			t.Errorf("FingerprintsConflict(%q, %q) = %v, want %v", c.stored, c.got, got, c.want)
		}
	}
}
