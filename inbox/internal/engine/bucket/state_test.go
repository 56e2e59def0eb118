package bucket

import (
	"context"
	"database/sql"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/idem-go/idem/inbox/internal/engine/bloom"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/sqldialect"
)

// Retiring the statements of a bucket list (SetStarts) must not hold the
// state's lock while the statements close. Closing one waits for each
// connection it was prepared on, and on SQLite such a connection can sit
// in a BEGIN that waits for the writer; when the writer's transaction
// needs the state's lock next (as every delivery's does), the three wait
// on one another until the BEGIN's busy timeout fails it with
// SQLITE_BUSY. Here the writer lets go only once Snapshot (the lock) has
// answered: the BEGIN must succeed.
func TestRetiredStatementsCloseOutsideTheLock(t *testing.T) {
	ctx := context.Background()
	db := testenv.Open(t, "sqlite", testenv.SQLiteDSN(t))
	db.SetMaxOpenConns(2)
	if _, err := db.ExecContext(ctx, "CREATE TABLE t (k INTEGER PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	writer, err := db.Conn(ctx) // the first connection: holds the write lock
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	st, err := db.PrepareContext(ctx, "SELECT count(*) FROM t") // on the second
	if err != nil {
		t.Fatal(err)
	}
	if _, err := writer.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	b := &State{D: sqldialect.SQLite, filters: map[int64]*bloom.Filter{}, filterFailed: map[int64]time.Time{},
		prepared: map[string]*sql.Stmt{"SELECT count(*) FROM t": st}}

	began := make(chan error, 1)
	go func() { // the second connection: BEGIN (IMMEDIATE) waits for the writer
		tx, err := db.BeginTx(ctx, nil)
		if err == nil {
			err = tx.Rollback()
		}
		began <- err
	}()
	testenv.WaitFor(t, time.Minute, "the BEGIN on the second connection", func() bool { return db.Stats().InUse == 2 })

	retired := make(chan struct{})
	go func() {
		b.SetStarts([]int64{60}) // retires st, which waits for the second connection
		close(retired)
	}()
	testenv.WaitFor(t, time.Minute, "the statements retired", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.version == 1
	})
	b.Snapshot() // the writer's next step: the state's lock
	if _, err := writer.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if err := <-began; err != nil {
		t.Fatalf("BEGIN beside the retiring statements: %v (the state's lock was held while they closed)", err)
	}
	<-retired
}
