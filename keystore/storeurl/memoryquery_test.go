package storeurl_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/storeurl"
)

func TestParseMemoryQuery(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]storeurl.MemoryOptions{
		"memory?max-bytes=64MiB":                          {MaxBytes: 64 << 20},
		"memory?max-bytes=1GB&max-keys=1000&capacity=500": {MaxBytes: 1e9, MaxKeys: 1000, Capacity: 500},
		"memory:/tmp/keys.snap?max-keys=10":               {MaxKeys: 10},
	} {
		s, err := storeurl.Parse(in)
		if err != nil || s.Kind != storeurl.Memory || s.Memory != want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", in, s, err, want)
		}
	}
	if s, _ := storeurl.Parse("memory:/tmp/keys.snap?max-keys=10"); s.Path != "/tmp/keys.snap" {
		t.Errorf("path %q", s.Path)
	}
	for in, want := range map[string]string{
		"memory?max-bytes=-1":          "must not be negative",
		"memory?max-bytes=64XB":        `unknown unit "XB"`,
		"memory?max-bytes=0":           "must be positive",
		"memory?max-keys=lots":         "max-keys=\"lots\": want a positive whole number",
		"memory?capacity=0":            "capacity=\"0\": want a positive whole number",
		"memory?colour=blue":           `unknown parameter "colour": want max-bytes, max-keys or capacity`,
		"memory?max-keys=1&max-keys=2": "max-keys given 2 times",
		"memory:?max-keys=1":           "want memory:PATH",
	} {
		_, err := storeurl.Parse(in)
		if !errors.Is(err, storeurl.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want ErrInvalid saying %q", in, err, want)
		}
	}
}

// A memory store opened with max-bytes refuses a result past its budget
// rather than growing.
func TestOpenMemoryMaxBytes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := mustOpen(t, ctx, mustParse(t, "memory?max-bytes=1KiB"), storeurl.Options{}).Store()
	c, err := s.Reserve(ctx, "k1", nil, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, c, make([]byte, 2048), time.Hour); !errors.Is(err, keystore.ErrResultTooLarge) {
		t.Fatalf("Complete of 2 KiB under a 1 KiB budget: %v, want ErrResultTooLarge", err)
	}
}
