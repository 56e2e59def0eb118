package idemkafka_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idem-go/idem/adapters/idemkafka"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/sqldialect"
)

// The OffsetConsumer (offsets in the effects' transaction) through a real
// failover: a primary and an asynchronous standby (StartPGHA), replication
// held back for a second, kill -9 of the primary, promotion; the consumer
// on the multi-host URL. Busy: records arrive throughout and the consumer
// is mid-batch at the kill. Idle: it applied a wave while replication was
// held, is idle at the kill, and the next wave comes after the promotion
// (issue 29, finding 4, on a real standby). Either way every record must be
// applied exactly once on the new primary: what the failover lost is
// consumed again from the stored offset. A Run that stops on a database
// error is started again, as a supervisor would.
func TestOffsetsFailover(t *testing.T) {
	t.Parallel()
	for _, busy := range []bool{true, false} {
		name := "idle"
		if busy {
			name = "busy"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			lost, doubled, rolledBack, restarts := offsetsFailover(t, busy)
			t.Logf("| OffsetConsumer, asynchronous, %s at the kill | lost %d | applied twice %d | effects the failover rolled back (consumed again) %d | Run restarted %d times |", name, lost, doubled, rolledBack, restarts)
			if lost > 0 || doubled > 0 {
				t.Errorf("%d records lost, %d applied twice", lost, doubled)
			}
		})
	}
}

func offsetsFailover(t *testing.T, busy bool) (lost, doubled, rolledBack int, restarts int64) {
	h := testenv.StartPGHA(t, testenv.PGAsync)
	db := testenv.Open(t, "pgx", h.URL())
	c := cluster(t, 1, "orders")
	if _, err := db.Exec(`CREATE TABLE effects (id text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	handler := func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO effects (id) VALUES ($1)`, string(r.Value))
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	var runs atomic.Int64
	done := make(chan struct{})
	go func() { // the supervisor: Run again after a database error
		defer close(done)
		for ctx.Err() == nil {
			con, err := idemkafka.NewOffsetConsumer(db, sqldialect.Postgres, handler, groupOpts(c, "g", "orders"), idemkafka.WithBatchSize(20))
			if err == nil {
				err = con.Migrate(ctx)
			}
			if err == nil {
				runs.Add(1)
				err = con.Run(ctx)
			}
			if con != nil {
				con.Close()
			}
			if ctx.Err() == nil && err != nil && !errors.Is(err, context.Canceled) {
				time.Sleep(100 * time.Millisecond)
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	distinct := func() int {
		var n int
		if err := db.QueryRow(`SELECT count(DISTINCT id) FROM effects`).Scan(&n); err != nil {
			return -1 // a connection to the dead primary; asked again
		}
		return n
	}
	total := 0
	cl := client(t, c)
	send := func(id string) error {
		return cl.ProduceSync(context.Background(), &kgo.Record{Topic: "orders", Key: []byte(id), Value: []byte(id)}).FirstErr()
	}
	wave := func(prefix string, n int) {
		for i := range n {
			if err := send(fmt.Sprintf("%s-%04d", prefix, i)); err != nil {
				t.Fatal(err)
			}
		}
		total += n
	}
	wave("a", 100)
	testenv.WaitFor(t, 60*time.Second, "wave a applied", func() bool { return distinct() == total })
	if err := h.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
	h.HoldReplication()
	if busy {
		// Records keep coming through the hold, the kill and the promotion.
		stop := make(chan struct{})
		produced := make(chan struct{})
		go func() {
			defer close(produced)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if send(fmt.Sprintf("b-%04d", i)) != nil {
					return // the test fails on the count
				}
				total++
				time.Sleep(5 * time.Millisecond)
			}
		}()
		time.Sleep(time.Second)
		h.KillPrimary()
		h.Promote()
		rolledBack = -1 // not counted: records still arrive
		time.Sleep(time.Second)
		close(stop)
		<-produced
	} else {
		wave("b", 100)
		// Applied on the primary alone; then the consumer is idle.
		primary := testenv.Open(t, "pgx", h.PrimaryURL())
		testenv.WaitFor(t, 60*time.Second, "wave b applied on the primary", func() bool {
			var n int
			return primary.QueryRow(`SELECT count(DISTINCT id) FROM effects`).Scan(&n) == nil && n == total
		})
		time.Sleep(500 * time.Millisecond) // idle: no batch in flight
		h.KillPrimary()
		h.Promote()
		n := distinct()
		for n < 0 {
			n = distinct()
		}
		rolledBack = total - n
		wave("c", 50)
	}
	// Every record applied on the new primary, or what is missing after
	// two minutes is lost.
	for deadline := time.Now().Add(2 * time.Minute); distinct() != total && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	<-done
	rows, err := db.Query(`SELECT count(*) FROM effects GROUP BY id HAVING count(*) > 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		doubled++
	}
	return total - distinct(), doubled, rolledBack, runs.Load() - 1
}
