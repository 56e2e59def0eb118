package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "c.csv")
	csv := "sqlite,v7,1000000,70000,2,26.5\nsqlite,v4,1000000,17000,3,25.6\nsqlite,v4,2000000,16000,4,25.6\npostgres,bare-uuid,2000000,0,1,88.0\nretire,sqlite,rows,1000,0.1,100,80\n"
	if err := os.WriteFile(in, []byte(csv), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "c.svg")
	if err := run(in, out); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "<svg") || !strings.Contains(string(b), "sqlite v4") {
		t.Fatalf("not the chart: %.200s", b)
	}
	if err := run(filepath.Join(dir, "missing.csv"), out); err == nil {
		t.Fatal("missing input accepted")
	}
}

func TestRunCompact(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "c.csv")
	csv := "window,one set,100000,0,0,22.5\nwindow,one set,102000,0,0,29.1\nmemstore,64 sets at 1.5 with phases i/64 (memstore),100000,0,0,23.4\nmemstore,64 sets at 1.5 with phases i/64 (memstore),1000000,0,0,23.6\n"
	if err := os.WriteFile(in, []byte(csv), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "c.svg")
	if err := runCompact(in, out); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "<svg") || !strings.Contains(string(b), "window one set") {
		t.Fatalf("not the chart: %.200s", b)
	}
	if err := os.WriteFile(in, []byte("engine,layout,keys,msgs_per_s,buckets,bytes_per_key\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := runCompact(in, out); err == nil {
		t.Fatal("a CSV without rows accepted")
	}
}
