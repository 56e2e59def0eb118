package dynamostore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/dynamostore"
)

func TestParseURL(t *testing.T) {
	for raw, want := range map[string]dynamostore.URL{
		"dynamodb://idem_keys":                                 {Table: "idem_keys"},
		"dynamodb://idem-keys.v2/":                             {Table: "idem-keys.v2"},
		"dynamodb://Keys?region=eu-west-1":                     {Table: "Keys", Region: "eu-west-1"},
		"dynamodb://k_1?endpoint=http://127.0.0.1:8000":        {Table: "k_1", Endpoint: "http://127.0.0.1:8000"},
		"dynamodb://k_1?region=local&endpoint=https%3A%2F%2Fh": {Table: "k_1", Region: "local", Endpoint: "https://h"},
	} {
		got, err := dynamostore.ParseURL(raw)
		if err != nil || got != want {
			t.Errorf("ParseURL(%q) = %+v, %v; want %+v", raw, got, err, want)
		}
		if again, err := dynamostore.ParseURL(got.String()); err != nil || again != got {
			t.Errorf("ParseURL(%q.String() = %q) = %+v, %v", raw, got.String(), again, err)
		}
	}
	for _, bad := range []string{
		"", "dynamodb:", "dynamodb://", "dynamodb:///tbl", "dynamodb:tbl", "redis://tbl",
		"dynamodb://ab", "dynamodb://tbl/extra", "dynamodb://tbl:8000", "dynamodb://user@tbl", "dynamodb://tbl#frag",
		"dynamodb://tbl?regoin=us-east-1", "dynamodb://tbl?region=", "dynamodb://tbl?region=US_EAST",
		"dynamodb://tbl?region=a&region=b", "dynamodb://tbl?endpoint=localhost:8000", "dynamodb://tbl?endpoint=ftp://h",
		"dynamodb://tbl?endpoint=http://", "dynamodb://tbl?endpoint=http://u:p@h", "dynamodb://tbl?create=true",
		"dynamodb://tbl?region=us-east-1;endpoint=x", "dynamodb://t%20bl",
	} {
		if u, err := dynamostore.ParseURL(bad); !errors.Is(err, dynamostore.ErrBadURL) || !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("ParseURL(%q) = %+v, %v; want an error wrapping ErrBadURL", bad, u, err)
		}
	}
}

// FuzzParseURL: the parser never panics, accepts only URLs whose table is a
// valid table name, and what it accepts prints back to a URL that parses
// the same.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{
		"dynamodb://tbl", "dynamodb://tbl?region=us-east-1&endpoint=http://localhost:4567",
		"dynamodb://tbl?endpoint=http%3A%2F%2Fh%3A1", "dynamodb://tbl/", "dynamodb://a.b-c_d?region=x",
		"dynamodb://tbl?region=a&region=b", "dynamodb://%zz", "dynamodb://tbl?%gh",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := dynamostore.ParseURL(raw)
		if err != nil {
			if !errors.Is(err, dynamostore.ErrBadURL) {
				t.Fatalf("ParseURL(%q): %v does not wrap ErrBadURL", raw, err)
			}
			return
		}
		if _, err := dynamostore.New(noAPI{}, u.Table); err != nil {
			t.Fatalf("ParseURL(%q) accepted table %q that New refuses: %v", raw, u.Table, err)
		}
		again, err := dynamostore.ParseURL(u.String())
		if err != nil || again != u {
			t.Fatalf("ParseURL(%q) = %+v; its String %q parses as %+v, %v", raw, u, u.String(), again, err)
		}
	})
}

// noAPI is a client that is never called.
type noAPI struct{ dynamostore.API }

// TestOpenURL opens a store from a URL on the test's dynalite, with
// credentials from the environment as the SDK's default chain reads them.
func TestOpenURL(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	t.Setenv("AWS_CONFIG_FILE", "/dev/null")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
	ctx := context.Background()
	table := testenv.Name("t_")
	endpoint := testenv.DynamoDBEndpoint(t)
	if _, err := dynamostore.OpenURL(ctx, "dynamodb://"+table+"?endpoint="+endpoint); !errors.Is(err, dynamostore.ErrBadURL) {
		t.Fatalf("OpenURL without a region: %v, want ErrBadURL", err)
	}
	s, err := dynamostore.OpenURL(ctx, "dynamodb://"+table+"?region=us-east-1&endpoint="+endpoint, dynamostore.WithScope("tenant"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := s.Reserve(ctx, "k", nil, time.Minute)
	if err != nil || c.State != keystore.Acquired || s.PartitionKey("k") != "{tenant}k" {
		t.Fatalf("Reserve on an OpenURL store: %+v %v", c, err)
	}
}
