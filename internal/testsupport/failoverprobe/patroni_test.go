package failoverprobe_test

import (
	"testing"
	"time"

	"github.com/idem-go/idem/internal/testsupport/testenv"
)

// failPatroni runs sc's fault on p: kill -9 of the leader (Patroni and
// PostgreSQL; no replication held back: the lag is what the load makes)
// or a switchover through the REST API. It returns how long until a new
// leader ran: for a kill, the leader key's ttl and a loop_wait, then the
// promotion.
func failPatroni(t *testing.T, p *testenv.Patroni, sc scenario, r *run) time.Duration {
	r.kill.Store(time.Now().UnixNano())
	start := time.Now()
	switch sc.fault {
	case faultKill:
		if _, err := p.KillLeader(); err != nil {
			t.Fatal(err)
		}
		r.dead.Store(time.Now().UnixNano())
		if _, err := p.WaitLeader(2 * time.Minute); err != nil {
			t.Fatal(err)
		}
	case faultSwitchover:
		// The old leader takes writes until Patroni stops it: the outage
		// is measured to the first commit begun once the new leader runs.
		if _, err := p.Switchover(); err != nil {
			t.Fatal(err)
		}
		r.dead.Store(time.Now().UnixNano())
	default:
		t.Fatalf("%v: not on Patroni", sc.fault)
	}
	return time.Since(start)
}
