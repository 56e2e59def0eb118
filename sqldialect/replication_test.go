package sqldialect_test

import (
	"context"
	"strings"
	"testing"

	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/sqldialect"
)

// CheckReplication tells an asynchronous standby (a failover loses
// acknowledged commits) from a synchronous one, and a statement_timeout
// that would cut a COMMIT's wait for the standby short.
func TestCheckReplication(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		mode   testenv.PGHAMode
		params string
		want   []string // substrings of the hazards, in order; none: no hazard
	}{
		{"async", testenv.PGAsync, "", []string{"1 of 1 streaming standbys are asynchronous"}},
		{"sync", testenv.PGSync, "", nil},
		{"sync with statement_timeout", testenv.PGSync, "&statement_timeout=5000", []string{"statement_timeout=5s applies to COMMIT"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := testenv.StartPGHA(t, c.mode)
			r, err := sqldialect.CheckReplication(ctx, testenv.Open(t, "pgx", h.PrimaryURL()+c.params), sqldialect.Postgres)
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Hazards) != len(c.want) {
				t.Fatalf("hazards %q, want %d like %q (%+v)", r.Hazards, len(c.want), c.want, r)
			}
			for i, w := range c.want {
				if !strings.Contains(r.Hazards[i], w) {
					t.Errorf("hazard %q, want one with %q", r.Hazards[i], w)
				}
			}
			s, err := sqldialect.CheckReplication(ctx, testenv.Open(t, "pgx", h.StandbyURL()), sqldialect.Postgres)
			if err != nil || !s.Standby {
				t.Errorf("on the standby: %+v %v, want Standby", s, err)
			}
		})
	}
	t.Run("sqlite", func(t *testing.T) {
		r, err := sqldialect.CheckReplication(ctx, testenv.SQLite(t), sqldialect.SQLite)
		if err != nil || len(r.Hazards) != 0 {
			t.Errorf("%+v %v", r, err)
		}
	})
}
