package bucketsql

import (
	"context"
	"database/sql"

	"github.com/idem-go/idem/inbox/internal/engine"
	"github.com/idem-go/idem/inbox/internal/engine/bucket"
	"github.com/idem-go/idem/sqldialect"
)

// Freeze is MigrateLayout's one transaction on PostgreSQL and SQLite: the
// meta table, and a BEFORE INSERT trigger on the rows table that refuses
// every insert (its lock waits for the transactions inserting there), so
// that every key recorded in the rows table is committed before the first
// is recorded in a bucket. It commits tx.
func Freeze(ctx context.Context, tx *sql.Tx, h *engine.Host) error {
	t := h.Table
	stmts := bucket.Schema(h.D, t, h.Width)
	fz := engine.FrozenName(t)
	switch h.D {
	case sqldialect.Postgres:
		fn := t + "_frozen"
		stmts = append(stmts,
			`CREATE OR REPLACE FUNCTION `+fn+`() RETURNS trigger LANGUAGE plpgsql AS $f$ BEGIN RAISE EXCEPTION USING ERRCODE = '`+engine.FrozenState+`', MESSAGE = 'inbox: table `+t+` was migrated to the bucketed layout: upgrade idem'; END $f$`,
			`CREATE TRIGGER `+fz+` BEFORE INSERT ON `+t+` FOR EACH ROW EXECUTE FUNCTION `+fn+`()`,
			`INSERT INTO `+bucket.MetaName(t)+` (name, value) VALUES ('migrated_us', convert_to((`+engine.DBNowUS(h.D)+`)::text, 'UTF8'))`)
	case sqldialect.SQLite:
		stmts = append(stmts,
			`CREATE TRIGGER `+fz+` BEFORE INSERT ON `+t+` BEGIN SELECT RAISE(ABORT, 'inbox: table `+t+` was migrated to the bucketed layout: upgrade idem'); END`,
			`INSERT INTO `+bucket.MetaName(t)+` (name, value) VALUES ('migrated_us', CAST(`+engine.DBNowUS(h.D)+` AS TEXT))`)
	}
	return engine.ExecCommit(ctx, tx, "migrate layout", stmts)
}
