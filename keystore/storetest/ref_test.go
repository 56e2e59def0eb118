package storetest_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/storetest"
)

// The reference store passes the suite it is the reference of.
func TestRefStore(t *testing.T) {
	storetest.Run(t, func(*testing.T) keystore.Store { return storetest.NewRefStore() })
}

// noExtend hides the reference store's Extend: a store that cannot renew.
type noExtend struct{ keystore.Store }

// TestExtendRequired runs the suite on a store without keystore.Extender
// in a child process: the suite must fail it, naming the missing
// interface, not pass it by skipping the Extend section.
func TestExtendRequired(t *testing.T) {
	if os.Getenv("STORETEST_CHILD") == "noextend" {
		storetest.Run(t, func(*testing.T) keystore.Store { return noExtend{storetest.NewRefStore()} })
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestExtendRequired$/^Extend$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "STORETEST_CHILD=noextend")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the suite passed a store without keystore.Extender:\n%s", out)
	}
	if !strings.Contains(string(out), "does not implement keystore.Extender") || !strings.Contains(string(out), "--- FAIL: TestExtendRequired/Extend") {
		t.Fatalf("the suite failed a store without keystore.Extender, but not in its Extend section:\n%s", out)
	}
}
