package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseStoreSpec(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, kind string
	}{
		{"memory", "memory"},
		{"sqlite:/var/lib/idem/keys.db", "sqlite"},
		{"postgres://u:p@db/idem", "postgres"},
		{"postgresql://db/idem", "postgres"},
		{"redis://127.0.0.1:6379/0", "redis"},
		{"rediss://u:p@cache:6380", "redis"},
		{"redis-cluster://10.0.0.1:7000,10.0.0.2:7000?buckets=16", "redis"},
		{"redis-cluster://a:7000?wait_replicas=1&wait_timeout=200ms", "redis"},
		{"nats://n1:4222,n2:4222?bucket=keys&replicas=3", "nats"},
		{"dynamodb://idem_keys?region=eu-west-1", "dynamodb"},
		{"dynamodb://idem_keys?region=us-east-1&endpoint=http://127.0.0.1:8000", "dynamodb"},
	} {
		got, err := parseStoreSpec(tc.in)
		if err != nil || got.kind != tc.kind {
			t.Errorf("parseStoreSpec(%q) = %+v, %v; want kind %q", tc.in, got, err, tc.kind)
		}
	}
	for _, bad := range []string{
		"", "sqlite:", "sqlite:/x?mode=ro", "mysql://db", "redis-cluster://a:7000?buckets=x",
		"redis-cluster://a:7000?nope=1", "dynamodb://", "dynamodb://t?colour=blue", "dynamodb://t?region=a&region=b",
	} {
		if _, err := parseStoreSpec(bad); !errors.Is(err, errStoreSpec) {
			t.Errorf("parseStoreSpec(%q) = %v, want errStoreSpec", bad, err)
		}
	}
	// The password never appears in the error.
	if _, err := parseStoreSpec("redis-cluster://u:s3cret@a:7000?buckets=x"); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error %v shows the password", err)
	}
}

// A nats:// store that nobody serves fails at open, with the store named,
// instead of starting a proxy that refuses every request.
func TestOpenStoreNATSDown(t *testing.T) {
	t.Parallel()
	spec, err := parseStoreSpec("nats://127.0.0.1:1?timeout=1s")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if s, err := openStore(ctx, spec, 1<<20); err == nil {
		s.close()
		t.Fatal("opened a NATS store on a closed port")
	} else if !strings.Contains(err.Error(), "nats store") {
		t.Fatalf("error does not name the store: %v", err)
	}
}
