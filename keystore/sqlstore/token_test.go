package sqlstore_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/sqlstore"
	"github.com/idem-go/idem/sqldialect"
)

// The database loses its last writes, as a failover to a standby that
// lagged does: the token sequence (or SQLite's counter row) goes back to
// what it was, and the rows written since are gone. Tokens handed out before
// must not be handed out again, nor lower ones (issue 29, finding 3): a key
// reserved and released, and a key completed, then both reserved again.
func TestTokensAfterLostTail(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d sqldialect.Dialect, db *sql.DB) {
		ctx := context.Background()
		s := newStore(t, db, d)
		// The "standby" state: the counter before any token was drawn.
		seq := sqlstore.DefaultTable + "_token"
		saved := counter(t, db, d, seq)
		var before = map[string]uint64{}
		for _, k := range []string{"released", "completed", "taken"} {
			c, err := s.Reserve(ctx, k, nil, time.Minute)
			if err != nil || c.State != keystore.Acquired {
				t.Fatalf("reserve %s: %+v %v", k, c, err)
			}
			before[k] = c.Token
			switch k {
			case "released":
				err = s.Release(ctx, c)
			case "completed":
				err = s.Complete(ctx, c, []byte("r"), time.Minute)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		// The lost tail: the counter back, the completed key's row gone,
		// the taken key's lease expired.
		setCounter(t, db, d, seq, saved)
		if _, err := db.Exec(`DELETE FROM `+sqlstore.DefaultTable+` WHERE token = `+d.Placeholder(1), int64(before["completed"])); err != nil {
			t.Fatal(err)
		}
		expire := `UPDATE ` + sqlstore.DefaultTable + ` SET expires_at = now() - interval '1 second'`
		if d == sqldialect.SQLite {
			expire = `UPDATE ` + sqlstore.DefaultTable + ` SET expires_at = 0`
		}
		if _, err := db.Exec(expire); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"released", "completed", "taken"} {
			c, err := s.Reserve(ctx, k, nil, time.Minute)
			if err != nil || c.State != keystore.Acquired {
				t.Fatalf("reserve %s again: %+v %v", k, c, err)
			}
			if c.Token <= before[k] {
				t.Errorf("%s: token %d after the lost tail, %d before: handed out again or lower", k, c.Token, before[k])
			}
		}
	})
}

// Tokens strictly increase for one key reserved and released in a tight
// loop, so the clock floor never hands out the same microsecond twice.
func TestTokensIncreaseFast(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d sqldialect.Dialect, db *sql.DB) {
		ctx := context.Background()
		s := newStore(t, db, d)
		var last uint64
		for i := range 200 {
			c, err := s.Reserve(ctx, "k", nil, time.Minute)
			if err != nil || c.State != keystore.Acquired {
				t.Fatalf("reserve: %+v %v", c, err)
			}
			if c.Token <= last {
				t.Fatalf("round %d: token %d after %d", i, c.Token, last)
			}
			last = c.Token
			if i%2 == 0 {
				err = s.Release(ctx, c)
			} else {
				err = s.Complete(ctx, c, nil, time.Nanosecond)
				time.Sleep(2 * time.Millisecond) // SQLite's clock has millisecond steps
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	})
}

// counter reads the token sequence's state (PostgreSQL: last_value and
// is_called as one number, -1 when nothing was drawn; SQLite: the row).
func counter(t *testing.T, db *sql.DB, d sqldialect.Dialect, seq string) int64 {
	t.Helper()
	q := `SELECT CASE WHEN is_called THEN last_value ELSE -1 END FROM ` + seq
	if d == sqldialect.SQLite {
		q = `SELECT v FROM ` + seq + ` WHERE id = 1`
	}
	var v int64
	if err := db.QueryRow(q).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func setCounter(t *testing.T, db *sql.DB, d sqldialect.Dialect, seq string, v int64) {
	t.Helper()
	q := `SELECT setval('` + seq + `', 1, false)`
	if v >= 0 {
		q = `SELECT setval('` + seq + `', ` + d.Placeholder(1) + `, true)`
	}
	if d == sqldialect.SQLite {
		q = `UPDATE ` + seq + ` SET v = ` + d.Placeholder(1) + ` WHERE id = 1`
	}
	var err error
	if v >= 0 || d == sqldialect.SQLite {
		_, err = db.Exec(q, v)
	} else {
		_, err = db.Exec(q)
	}
	if err != nil {
		t.Fatal(err)
	}
}
