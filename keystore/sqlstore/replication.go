package sqlstore

import (
	"context"

	"github.com/idem-go/idem/internal/option"
	"github.com/idem-go/idem/internal/replicas"
	"github.com/idem-go/idem/sqldialect"
)

// WithReplicationCheck has [Store.Migrate] read how the database
// acknowledges a COMMIT relative to its standbys
// ([sqldialect.CheckReplication]) and pass what it found to f, once per
// Migrate. A non-empty r.Hazards means a failover can forget completions
// (the key is reserved again and its effect runs twice; docs/ha.md says
// what to run instead); f decides whether to log, alert or refuse to
// start. If the check itself fails (a role that may not read the
// settings), f gets a Replication whose only hazard says so; Migrate does
// not fail for it.
func WithReplicationCheck(f func(r sqldialect.Replication)) Option {
	return option.Check("sqlstore", f != nil, func(c *config) { c.replication = f }, "nil replication check")
}

// checkReplication is Migrate's last step when WithReplicationCheck is set.
func (s *Store) checkReplication(ctx context.Context) {
	if s.replication == nil {
		return
	}
	s.replication(replicas.Check(ctx, s.db, s.d))
}
