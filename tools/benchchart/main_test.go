package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// drawCSV writes csv to c.csv in a new temporary directory, has chart draw
// it to c.svg there, and returns both paths and the SVG; an error from
// either file or from chart fails the test.
func drawCSV(t *testing.T, chart func(in, out string) error, csv string) (in, out, svg string) {
	t.Helper()
	dir := t.TempDir()
	in, out = filepath.Join(dir, "c.csv"), filepath.Join(dir, "c.svg")
	if err := os.WriteFile(in, []byte(csv), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := chart(in, out); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return in, out, string(b)
}

func TestRun(t *testing.T) {
	in, out, b := drawCSV(t, run, "sqlite,v7,1000000,70000,2,26.5\nsqlite,v4,1000000,17000,3,25.6\nsqlite,v4,2000000,16000,4,25.6\npostgres,bare-uuid,2000000,0,1,88.0\nretire,sqlite,rows,1000,0.1,100,80\n")
	for _, want := range []string{"<svg", "SQLite: msg/s", "PostgreSQL: bytes a key", "UUIDv4 keys", "bare table, uuid key"} {
		if !strings.Contains(b, want) {
			t.Fatalf("the chart has no %q: %.200s", want, b)
		}
	}
	if err := run(filepath.Join(filepath.Dir(in), "missing.csv"), out); err == nil {
		t.Fatal("missing input accepted")
	}
}

func TestRunCompact(t *testing.T) {
	in, out, b := drawCSV(t, runCompact, "window,one set,100000,0,0,22.5\nwindow,one set,102000,0,0,29.1\nmemstore,64 sets at 1.5 with phases i/64 (memstore),100000,0,0,23.4\nmemstore,64 sets at 1.5 with phases i/64 (memstore),1000000,0,0,23.6\n")
	if !strings.Contains(b, "<svg") || !strings.Contains(b, "window: bytes a key") || !strings.Contains(b, "one set") {
		t.Fatalf("not the chart: %.200s", b)
	}
	if err := os.WriteFile(in, []byte("engine,layout,keys,msgs_per_s,buckets,bytes_per_key\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := runCompact(in, out); err == nil {
		t.Fatal("a CSV without rows accepted")
	}
}

// Every layout the scale curve writes has a colour and glyph of its own, so
// no two series in a row look alike.
func TestLayoutStyles(t *testing.T) {
	seen := map[string]string{}
	for _, l := range []string{"v4", "v7", "v7-rows", "v4-packed", "bare-uuid", "bare-binary16"} {
		c, g := layoutStyle(l)
		r, gr, bl, _ := c.RGBA()
		k := fmt.Sprint(r, gr, bl, g)
		if other, ok := seen[k]; ok && !strings.HasPrefix(l, "bare") || ok && !strings.HasPrefix(other, "bare") {
			t.Errorf("%s and %s share a colour and glyph", l, other)
		}
		seen[k] = l
	}
	if layoutLabel("v4-cache256M") != "UUIDv4 keys, 256M page cache" || layoutLabel("v7-rows") != "UUIDv7 keys, rows layout" {
		t.Errorf("labels: %q %q", layoutLabel("v4-cache256M"), layoutLabel("v7-rows"))
	}
}
