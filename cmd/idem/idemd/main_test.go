package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := newRoot(&out, &errOut)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String() + errOut.String(), err
}

func TestDemo(t *testing.T) {
	out, err := run(t, "demo")
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	// The Account run's five lines, verbatim and in order.
	want := "evt-1: applied=true balance=50\nevt-2: applied=true balance=80\nevt-1: applied=false balance=80\nevt-2: applied=false balance=80\nevt-3: applied=true balance=85\n"
	if !strings.Contains(out, want) {
		t.Errorf("demo output lacks the Account run's five lines:\n%s", out)
	}
	for _, s := range []string{"balance = 100  <- double credit", "balance = 50", "delivered 32 times: applied 1, duplicates 31, balance = 50"} {
		if !strings.Contains(out, s) {
			t.Errorf("demo output lacks %q:\n%s", s, out)
		}
	}
}

func TestUnknownCommand(t *testing.T) {
	if _, err := run(t, "nope"); err == nil || !strings.Contains(err.Error(), "unknown command") {
		t.Fatalf("err = %v", err)
	}
}

func TestPlan(t *testing.T) {
	out, err := run(t, "plan", "--rate", "100000", "--horizon", "24h")
	if err != nil {
		t.Fatal(err)
	}
	// 100,000 msg/s kept for 24 h: 100,000 × 86,400 = 8.64 × 10^9 keys.
	for _, s := range []string{"8.64×10^9 keys", "inbox on PostgreSQL", "1.4 TB", "sequence marks"} {
		if !strings.Contains(out, s) {
			t.Errorf("plan output lacks %q:\n%s", s, out)
		}
	}
	if _, err := run(t, "plan", "--rate", "0", "--horizon", "1h"); err == nil {
		t.Error("zero rate accepted")
	}
}
