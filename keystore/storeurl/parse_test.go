package storeurl_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/idem-go/idem/keystore/storeurl"
)

func TestParse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		kind storeurl.Kind
		path string
	}{
		{"memory", storeurl.Memory, ""},
		{"memory:/var/lib/idem/keys.snap", storeurl.Memory, "/var/lib/idem/keys.snap"},
		{"sqlite:/var/lib/idem/keys.db", storeurl.SQLite, "/var/lib/idem/keys.db"},
		{"postgres://u:p@db/idem", storeurl.Postgres, ""},
		{"postgresql://db/idem", storeurl.Postgres, ""},
		{"redis://127.0.0.1:6379/0", storeurl.Redis, ""},
		{"rediss://u:p@cache:6380", storeurl.Redis, ""},
		{"redis-cluster://10.0.0.1:7000,10.0.0.2:7000?buckets=16", storeurl.Redis, ""},
		{"redis-cluster://a:7000?wait_replicas=1&wait_timeout=200ms", storeurl.Redis, ""},
		{"nats://n1:4222,n2:4222?bucket=keys&replicas=3", storeurl.NATS, ""},
		{"dynamodb://idem_keys?region=eu-west-1", storeurl.DynamoDB, ""},
		{"dynamodb://idem_keys?region=us-east-1&endpoint=http://127.0.0.1:8000", storeurl.DynamoDB, ""},
	} {
		got, err := storeurl.Parse(tc.in)
		if err != nil || got.Kind != tc.kind || got.Path != tc.path || got.URL != tc.in {
			t.Errorf("Parse(%q) = %+v, %v; want kind %q, path %q", tc.in, got, err, tc.kind, tc.path)
		}
	}
	for _, bad := range []string{
		"", "memory:", "memory:\x00", "sqlite:", "sqlite:/x?mode=ro", "sqlite:/x#y", "mysql://db", "redis-cluster://a:7000?buckets=x",
		"redis-cluster://a:7000?nope=1", "dynamodb://", "dynamodb://t?colour=blue", "dynamodb://t?region=a&region=b", "Memory",
	} {
		if _, err := storeurl.Parse(bad); !errors.Is(err, storeurl.ErrInvalid) {
			t.Errorf("Parse(%q) = %v, want ErrInvalid", bad, err)
		}
	}
	// An unknown form is answered with the forms that are known.
	if _, err := storeurl.Parse("mysql://db"); err == nil || !strings.Contains(err.Error(), storeurl.Forms) {
		t.Errorf("error %v does not list the forms", err)
	}
	// The password never appears in the error, nor in Spec.String.
	if _, err := storeurl.Parse("redis-cluster://u:s3cret@a:7000?buckets=x"); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error %v shows the password", err)
	}
	if s, _ := storeurl.Parse("postgres://u:s3cret@db/idem"); strings.Contains(s.String(), "s3cret") {
		t.Errorf("Spec.String() = %q shows the password", s)
	}
}

// FuzzParse: Parse never panics, refuses with ErrInvalid only, and what it
// accepts parses again to the same Spec (so a URL round-trips through a
// configuration file).
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"memory", "memory:/x", "sqlite:/tmp/a.db", "postgres://u:p@h/db", "redis://h:1/0", "redis-cluster://a:1,b:2?buckets=4",
		"rediss-cluster://u:p@a:1?wait_replicas=1&wait_timeout=1s", "nats://a:1?bucket=k", "tls://a:1", "dynamodb://t?region=x",
		"dynamodb://t?region=x&endpoint=http://h:1", "redis://%zz", "redis://h?db=x", "",
		"memory?max-bytes=64MiB", "memory:/x?max-keys=1&capacity=2", "memory?max-bytes=-1", "memory?max-bytes=1&max-bytes=2", "memory?%zz",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 4096 {
			return // past the input bound: not a store URL anyone writes
		}
		spec, err := storeurl.Parse(s)
		if err != nil {
			if !errors.Is(err, storeurl.ErrInvalid) {
				t.Fatalf("Parse(%q): %v does not wrap ErrInvalid", s, err)
			}
			return
		}
		if spec.URL != s || spec.Kind == "" {
			t.Fatalf("Parse(%q) = %+v", s, spec)
		}
		again, err := storeurl.Parse(spec.URL)
		if err != nil || again != spec {
			t.Fatalf("Parse(%q) again = %+v, %v; first %+v", s, again, err, spec)
		}
	})
}
