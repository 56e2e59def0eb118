package versiongate_test

import (
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"
	"os"
	"sync"
	"testing"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/testsupport/dbtest"
	"github.com/idem-go/idem/internal/testsupport/inboxtest"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/sqldialect"
	"github.com/idem-go/idem/versiongate"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

var dbs = dbtest.All

var productView = versiongate.Table{Name: "product_view", ID: "id", Version: "version", Columns: []string{"price", "name"}}

func setup(t *testing.T, d sqldialect.Dialect, open func(testing.TB) *sql.DB) (*sql.DB, *versiongate.Gate) {
	t.Helper()
	db := open(t)
	if _, err := db.Exec("CREATE TABLE product_view (id VARCHAR(64) PRIMARY KEY, version BIGINT NOT NULL, price BIGINT NOT NULL, name VARCHAR(64) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	g, err := versiongate.New(d, productView)
	if err != nil {
		t.Fatal(err)
	}
	return db, g
}

func read(t *testing.T, db *sql.DB, d sqldialect.Dialect, id string) (version, price int64) {
	t.Helper()
	if err := db.QueryRow("SELECT version, price FROM product_view WHERE id = "+d.Placeholder(1), id).Scan(&version, &price); err != nil {
		t.Fatal(err)
	}
	return version, price
}

func TestGate(t *testing.T) {
	for _, b := range dbs {
		t.Run(b.Name, func(t *testing.T) {
			db, g := setup(t, b.D, b.Open)
			ctx := context.Background()
			steps := []struct {
				op      string
				version int64
				price   int64
				applied bool
				// stored afterwards
				wantV, wantP int64
			}{
				{"update", 5, 10, false, 0, 0}, // no row yet: Update does not create
				{"upsert", 5, 10, true, 5, 10},
				{"upsert", 5, 11, false, 5, 10}, // duplicate version
				{"upsert", 7, 14, true, 7, 14},
				{"upsert", 6, 12, false, 7, 14}, // late, stale
				{"update", 6, 12, false, 7, 14},
				{"update", 7, 99, false, 7, 14},
				{"update", 8, 16, true, 8, 16},
				{"upsert", 8, 16, false, 8, 16}, // same version, same values
			}
			for i, s := range steps {
				var applied bool
				var err error
				if s.op == "update" {
					applied, err = g.Update(ctx, db, "p-1", s.version, s.price, "pen")
				} else {
					applied, err = g.Upsert(ctx, db, "p-1", s.version, s.price, "pen")
				}
				if err != nil || applied != s.applied {
					t.Fatalf("step %d %s v%d: applied=%v err=%v, want %v", i, s.op, s.version, applied, err, s.applied)
				}
				if s.wantV > 0 {
					if v, p := read(t, db, b.D, "p-1"); v != s.wantV || p != s.wantP {
						t.Fatalf("step %d: stored v%d price %d, want v%d price %d", i, v, p, s.wantV, s.wantP)
					}
				}
			}
		})
	}
}

// Concurrent writers with shuffled versions: the newest version wins and
// carries its own value, whatever the arrival order.
func TestGateConcurrentOutOfOrder(t *testing.T) {
	for _, b := range dbs {
		t.Run(b.Name, func(t *testing.T) {
			db, g := setup(t, b.D, b.Open)
			db.SetMaxOpenConns(8)
			versions := rand.Perm(60)
			var wg sync.WaitGroup
			var mu sync.Mutex
			appliedCount := 0
			for w := 0; w < 4; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := w; i < len(versions); i += 4 {
						v := int64(versions[i] + 1)
						var applied bool
						var err error
						for attempt := 0; attempt < 20; attempt++ {
							applied, err = g.Upsert(context.Background(), db, "p-1", v, v*100, "pen")
							if err == nil || !b.D.Retryable(err) {
								break
							}
						}
						if err != nil {
							t.Error(err)
							return
						}
						if applied {
							mu.Lock()
							appliedCount++
							mu.Unlock()
						}
					}
				}()
			}
			wg.Wait()
			if v, p := read(t, db, b.D, "p-1"); v != 60 || p != 6000 {
				t.Fatalf("stored v%d price %d, want v60 price 6000", v, p)
			}
			if appliedCount < 1 || appliedCount > 60 {
				t.Fatalf("applied %d times", appliedCount)
			}
		})
	}
}

// A version gate inside an inbox handler: the key, the gated write and any
// other effect commit together.
func TestGateInsideInbox(t *testing.T) {
	db, g := setup(t, sqldialect.SQLite, testenv.SQLite)
	ctx := context.Background()
	in := inboxtest.Migrated(t, db, sqldialect.SQLite, "catalog")
	var gated []bool
	for _, m := range []struct {
		key     string
		version int64
	}{{"e-7", 7}, {"e-6", 6}, {"e-7", 7}} {
		applied, err := in.Process(ctx, m.key, func(ctx context.Context, tx *sql.Tx) error {
			ok, err := g.Upsert(ctx, tx, "p-1", m.version, m.version, "pen")
			gated = append(gated, ok)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		_ = applied
	}
	if len(gated) != 2 || !gated[0] || gated[1] {
		t.Fatalf("gate results %v: want [true false] (the redelivered e-7 never reaches the gate)", gated)
	}
}

func TestNewRejects(t *testing.T) {
	cases := []versiongate.Table{
		{Name: "t;", ID: "id", Version: "v", Columns: []string{"a"}},
		{Name: "t", ID: "id", Version: "v"},
		{Name: "t", ID: "id", Version: "v", Columns: []string{"a b"}},
		{Name: "t", ID: "id", Version: "id", Columns: []string{"a"}},
		{Name: "t", ID: "", Version: "v", Columns: []string{"a"}},
	}
	for _, c := range cases {
		if _, err := versiongate.New(sqldialect.Postgres, c); !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("%+v: err = %v", c, err)
		}
	}
	if _, err := versiongate.New(0, productView); !errors.Is(err, sqldialect.ErrUnknownDialect) {
		t.Errorf("unknown dialect: %v", err)
	}
	g, _ := versiongate.New(sqldialect.SQLite, productView)
	if _, err := g.Upsert(context.Background(), nil, "p", 1, 10); !errors.Is(err, idem.ErrInvalidArgument) {
		t.Errorf("wrong value count: %v", err)
	}
}

func TestMemory(t *testing.T) {
	m := versiongate.NewMemory[string, int]()
	for i, s := range []struct {
		v       int64
		applied bool
	}{{5, true}, {7, true}, {6, false}, {7, false}, {8, true}} {
		if got := m.Apply("p", s.v, int(s.v)*10); got != s.applied {
			t.Fatalf("step %d v%d: applied=%v", i, s.v, got)
		}
	}
	if v, ver, ok := m.Get("p"); !ok || v != 80 || ver != 8 || m.Len() != 1 {
		t.Fatalf("Get = %v %v %v", v, ver, ok)
	}
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for v := int64(0); v < 1000; v++ {
				m.Apply("q", v*8+int64(w), int(v*8)+w)
			}
		}()
	}
	wg.Wait()
	if v, ver, _ := m.Get("q"); ver != 7999 || v != 7999 {
		t.Fatalf("concurrent: %v %v", v, ver)
	}
}

// TestGateMySQLAutoIncrement: the MySQL upsert reads its outcome from the
// insert id as well as the affected-row count; a table with an
// AUTO_INCREMENT column reports its own ids on insert, and the outcome must
// still be right, with and without clientFoundRows.
func TestGateMySQLAutoIncrement(t *testing.T) {
	for _, b := range dbs {
		if b.D != sqldialect.MySQL {
			continue
		}
		t.Run(b.Name, func(t *testing.T) {
			db := b.Open(t)
			db.SetMaxOpenConns(1) // one session: LAST_INSERT_ID() carries over between calls
			if _, err := db.Exec("CREATE TABLE counted (seq BIGINT AUTO_INCREMENT PRIMARY KEY, id VARCHAR(64) NOT NULL UNIQUE, version BIGINT NOT NULL, price BIGINT NOT NULL)"); err != nil {
				t.Fatal(err)
			}
			g, err := versiongate.New(b.D, versiongate.Table{Name: "counted", ID: "id", Version: "version", Columns: []string{"price"}})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for i, s := range []struct {
				id      string
				version int64
				applied bool
			}{{"a", 1, true}, {"a", 1, false}, {"b", 1, true}, {"a", 0, false}, {"a", 2, true}, {"c", -3, true}, {"c", -3, false}, {"b", 1, false}} {
				applied, err := g.Upsert(ctx, db, s.id, s.version, s.version*10)
				if err != nil || applied != s.applied {
					t.Fatalf("step %d %s v%d: applied=%v err=%v, want %v", i, s.id, s.version, applied, err, s.applied)
				}
			}
		})
	}
}
