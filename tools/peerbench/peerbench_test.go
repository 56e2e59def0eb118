package main

import (
	"os"
	"strings"
	"testing"
)

func TestMain(m *testing.M) {
	if os.Getenv(serveEnv) != "" {
		serveChild()
	}
	os.Exit(m.Run())
}

// TestShort runs every comparison in its short form: it asserts the
// correctness on idem's side (0 lost, 0 doubled, 0 stuck), never a speed.
func TestShort(t *testing.T) {
	var out strings.Builder
	err := run(&out, shortOptions())
	t.Log(out.String())
	if err != nil {
		t.Fatal(err)
	}
}
