package testport_test

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/internal/testsupport/testport"
)

// Ports handed out are distinct, below the kernel's ephemeral range, and
// stay reserved: another opener of a port's lock file (another test
// process) cannot take its lock.
func TestFreeReserved(t *testing.T) {
	lo, hi, ok := testport.Range()
	if !ok {
		testenv.Cannot(t, "the kernel's ephemeral port range starts below 20000, so no ports can be reserved below it; raise its start with: sysctl -w net.ipv4.ip_local_port_range='32768 60999'")
	}
	seen := map[int]bool{}
	for range 50 {
		p, err := testport.Free()
		if err != nil {
			t.Fatal(err)
		}
		if p < lo || p >= hi {
			t.Fatalf("port %d outside [%d, %d)", p, lo, hi)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		f, err := os.Open(filepath.Join(testport.LockDir(), strconv.Itoa(p)))
		if err != nil {
			t.Fatal(err)
		}
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		f.Close()
		if err == nil {
			t.Fatalf("port %d's lock was free: another process could take the port", p)
		}
	}
}
