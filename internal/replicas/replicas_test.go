package replicas

import (
	"errors"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/sqldialect"
)

type config struct{ wait sqldialect.ReplicaWait }

func TestWaitOption(t *testing.T) {
	t.Parallel()
	wait := func(c *config) *sqldialect.ReplicaWait { return &c.wait }
	c := config{wait: sqldialect.ReplicaWait{Applied: true}}
	if err := WaitOption("pkg", 2, time.Second, wait)(&c); err != nil {
		t.Fatal(err)
	}
	if want := (sqldialect.ReplicaWait{Standbys: 2, Timeout: time.Second, Applied: true}); c.wait != want {
		t.Fatalf("got %+v, want %+v (Applied kept)", c.wait, want)
	}
	for _, bad := range []struct {
		n int
		d time.Duration
	}{{-1, time.Second}, {1, 0}, {1, time.Microsecond}} {
		err := WaitOption("pkg", bad.n, bad.d, wait)(&config{})
		if !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("WaitOption(%d, %v): %v, want ErrInvalidOption", bad.n, bad.d, err)
		}
	}
}
