package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/sqldialect"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

func newGroupStore(t *testing.T) *Store {
	t.Helper()
	db := testenv.SQLite(t)
	db.SetMaxOpenConns(1)
	s, err := New(db, sqldialect.SQLite, WithMaxResultSize(1024))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("CREATE TABLE g (k INTEGER PRIMARY KEY, n INTEGER NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	// The store's statements must prepare, or groups run each operation on
	// its own.
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// insert is an operation that adds row k; it fails on its first run inside
// a shared transaction when failFirst is set.
func insert(k int, failFirst *atomic.Bool, grouped *atomic.Int64) func(context.Context, runner) error {
	return func(ctx context.Context, x runner) error {
		if x.tx != nil {
			grouped.Add(1)
			if failFirst != nil && failFirst.CompareAndSwap(true, false) {
				return errors.New("injected")
			}
		}
		_, err := x.exec(ctx, "INSERT INTO g (k, n) VALUES (?, 1) ON CONFLICT (k) DO UPDATE SET n = n + 1", k)
		return err
	}
}

// TestGroupCommit: concurrent operations share transactions, and each one
// takes effect exactly once, also when one of them fails inside a shared
// transaction (the transaction is rolled back and each runs on its own).
func TestGroupCommit(t *testing.T) {
	for _, failing := range []bool{false, true} {
		t.Run(fmt.Sprintf("failing=%v", failing), func(t *testing.T) {
			s := newGroupStore(t)
			var fail atomic.Bool
			var grouped atomic.Int64
			const callers, each = 32, 20
			var wg sync.WaitGroup
			for c := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range each {
						var ff *atomic.Bool
						if failing && i == each/2 {
							fail.Store(true)
							ff = &fail
						}
						if err := s.do(context.Background(), insert(c*each+i, ff, &grouped)); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			var rows, total int
			if err := s.db.QueryRow("SELECT COUNT(*), COALESCE(SUM(n), 0) FROM g").Scan(&rows, &total); err != nil {
				t.Fatal(err)
			}
			if rows != callers*each || total != callers*each {
				t.Fatalf("%d rows with n summing to %d, want %d each: an operation was lost or applied twice", rows, total, callers*each)
			}
			if grouped.Load() == 0 {
				t.Fatalf("no operation ran in a shared transaction with %d concurrent callers", callers)
			}
			s.grp.mu.Lock()
			defer s.grp.mu.Unlock()
			if s.grp.leading || len(s.grp.queue) != 0 {
				t.Fatalf("group left leading=%v with %d queued", s.grp.leading, len(s.grp.queue))
			}
		})
	}
}

// TestGroupCancelled: an operation whose ctx ended while it was queued, before
// its turn, is not run, reports ctx's error, and does not disturb the others.
// (One whose ctx ended before the call does not even queue.)
func TestGroupCancelled(t *testing.T) {
	s := newGroupStore(t)
	var grouped atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	release := make(chan struct{})
	// Hold the lead so that the next operations queue behind it.
	started := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = s.do(context.Background(), func(ctx context.Context, x runner) error {
			close(started)
			<-release
			return nil
		})
	}()
	<-started
	errs := make(chan error, 2)
	wg.Add(2)
	go func() { defer wg.Done(); errs <- s.do(ctx, insert(1, nil, &grouped)) }()
	go func() { defer wg.Done(); errs <- s.do(context.Background(), insert(2, nil, &grouped)) }()
	waitQueued(s, 2)
	cancel()
	close(release)
	wg.Wait()
	close(errs)
	var cancelled, ok int
	for err := range errs {
		switch {
		case errors.Is(err, context.Canceled):
			cancelled++
		case err == nil:
			ok++
		default:
			t.Fatal(err)
		}
	}
	var keys []int
	rows, err := s.db.Query("SELECT k FROM g ORDER BY k")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k int
		_ = rows.Scan(&k)
		keys = append(keys, k)
	}
	if cancelled != 1 || ok != 1 || fmt.Sprint(keys) != "[2]" {
		t.Fatalf("cancelled %d ok %d rows %v; want 1, 1 and [2]", cancelled, ok, keys)
	}
}

// TestGroupFreshPoolOfOne: the first operations of a fresh store on a pool
// of one connection (as idem serve opens SQLite) run in one shared
// transaction. It holds the only connection, so nothing inside it may wait
// for another one: preparing a statement on the pool there would deadlock.
func TestGroupFreshPoolOfOne(t *testing.T) {
	s := newGroupStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	fresh, err := New(s.db, sqldialect.SQLite, WithMaxResultSize(1024))
	if err != nil {
		t.Fatal(err)
	}
	const n = 32
	var grouped atomic.Int64
	// Hold the lead until all n operations are queued, so that they share
	// the first transaction: none of their statements is prepared yet.
	release, held := make(chan struct{}), make(chan struct{})
	go func() {
		_ = fresh.do(ctx, func(context.Context, runner) error { close(held); <-release; return nil })
	}()
	<-held
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := fresh.Reserve(ctx, fmt.Sprint("k", i), nil, time.Minute)
			if err != nil {
				t.Error(err)
				return
			}
			if err := fresh.Complete(ctx, c, []byte("r"), time.Minute); err != nil {
				t.Error(err)
			}
		}()
		// And, queued beside the Reserves, an operation that no statement
		// was prepared for: it is in the first shared transaction too.
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fresh.do(ctx, insert(i, nil, &grouped)); err != nil {
				t.Error(err)
			}
		}()
	}
	waitQueued(fresh, 2*n)
	close(release)
	wg.Wait()
	if grouped.Load() == 0 {
		t.Fatal("no operation ran in a shared transaction")
	}
}

// TestGroupPanic: an operation that panics fails its batch with an error,
// the panic reaches its own caller, and the group keeps working.
func TestGroupPanic(t *testing.T) {
	s := newGroupStore(t)
	var grouped atomic.Int64
	release, held := make(chan struct{}), make(chan struct{})
	go func() {
		_ = s.do(context.Background(), func(context.Context, runner) error { close(held); <-release; return nil })
	}()
	<-held
	var wg sync.WaitGroup
	var panicked atomic.Bool
	errs := make(chan error, 1)
	wg.Add(2)
	go func() {
		defer wg.Done()
		defer func() { panicked.Store(recover() != nil) }()
		_ = s.do(context.Background(), func(context.Context, runner) error { panic("boom") })
	}()
	go func() {
		defer wg.Done()
		errs <- s.do(context.Background(), insert(1, nil, &grouped))
	}()
	waitQueued(s, 2)
	close(release)
	wg.Wait()
	if !panicked.Load() {
		t.Fatal("the panicking operation's caller did not see the panic")
	}
	if err := <-errs; err == nil {
		// It may have run before the panicking one in the shared
		// transaction, which was then never committed: nil would be a lie.
		var n int
		_ = s.db.QueryRow("SELECT COUNT(*) FROM g").Scan(&n)
		if n != 1 {
			t.Fatalf("the other operation reported success but wrote %d rows", n)
		}
	}
	done := make(chan error, 1)
	go func() { done <- s.do(context.Background(), insert(2, nil, &grouped)) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the group is stuck after a panic")
	}
}

// TestGroupWriterLockedOut: another process holds SQLite's write lock while
// grouped calls queue (a store that cannot take writes for a while). They
// wait, none fails or runs twice, and all land once the lock is released.
func TestGroupWriterLockedOut(t *testing.T) {
	dsn := testenv.SQLiteDSN(t)
	open := func() *sql.DB {
		db := testenv.Open(t, "sqlite", dsn)
		db.SetMaxOpenConns(1)
		return db
	}
	db, locker := open(), open() // a second pool stands for another process
	s, err := New(db, sqldialect.SQLite, WithMaxResultSize(1024))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	tx, err := locker.BeginTx(ctx, nil) // BEGIN IMMEDIATE: takes the write lock
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "CREATE TABLE hold (x INTEGER)"); err != nil {
		t.Fatal(err)
	}
	const n = 16
	var wg sync.WaitGroup
	tokens := make(chan uint64, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := s.Reserve(ctx, fmt.Sprint("k", i%8), nil, time.Minute) // two callers per key
			if err != nil {
				t.Error(err)
				return
			}
			if c.State == keystore.Acquired {
				tokens <- c.Token
			}
		}()
	}
	time.Sleep(300 * time.Millisecond) // the callers queue behind the lock
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(tokens)
	var acquired int
	for range tokens {
		acquired++
	}
	var rows int
	if err := db.QueryRow("SELECT COUNT(*) FROM " + DefaultTable).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if acquired != 8 || rows != 8 {
		t.Fatalf("%d acquired, %d rows; want 8 and 8: one Acquired per key", acquired, rows)
	}
}

// waitQueued returns once n operations wait in s's group queue.
func waitQueued(s *Store, n int) {
	for {
		s.grp.mu.Lock()
		queued := len(s.grp.queue)
		s.grp.mu.Unlock()
		if queued == n {
			return
		}
		runtime.Gosched()
	}
}
