package replicas

import (
	"context"
	"fmt"
	"time"

	"github.com/idem-go/idem/internal/option"
	"github.com/idem-go/idem/sqldialect"
)

// WaitOption is package pkg's WithWaitReplicas(n, timeout): it sets the
// standby count and the timeout of the [sqldialect.ReplicaWait] that wait
// returns from the package's config (keeping its Applied), or fails when
// they cannot be met.
func WaitOption[C any](pkg string, n int, timeout time.Duration, wait func(*C) *sqldialect.ReplicaWait) func(*C) error {
	w := sqldialect.ReplicaWait{Standbys: n, Timeout: timeout}
	return option.Check(pkg, w.Validate() == nil, func(c *C) { p := wait(c); p.Standbys, p.Timeout = n, timeout },
		"wait for %d replicas with timeout %v: want n ≥ 0 and a timeout of at least 1ms", n, timeout)
}

// Check runs [sqldialect.CheckReplication] with q; if the check itself
// fails (a role that may not read the settings), the Replication it
// returns has that failure as its only hazard, so that a caller reports
// it like any other and never fails for it.
func Check(ctx context.Context, q sqldialect.RowQuerier, d sqldialect.Dialect) sqldialect.Replication {
	r, err := sqldialect.CheckReplication(ctx, q, d)
	if err != nil {
		r.Hazards = []string{fmt.Sprintf("could not check replication: %v", err)}
	}
	return r
}
