package sequence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/idem-go/idem/sequence"
	"github.com/idem-go/idem/sqldialect"
)

// A lost acknowledgement: producer 7 sends sequence 5 to partition 2, the broker
// appends it and the acknowledgement is lost, the producer retries sequence
// 5, and the broker answers with the original offset without appending.
func ExampleTracker_Check() {
	tr, err := sequence.NewTracker()
	if err != nil {
		log.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	b := sequence.Batch{ProducerID: 7, Partition: 2, FirstSeq: 5, LastSeq: 5}

	v, err := tr.Check(b, now) // first send
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("send:  duplicate=%v offset=%d\n", v.Duplicate, v.Offset)

	v, err = tr.Check(b, now.Add(time.Second)) // the retry after the lost ack
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("retry: duplicate=%v offset=%d\n", v.Duplicate, v.Offset)
	fmt.Println("records in partition 2:", tr.LogEndOffset(2))

	// A sequence that skips ahead is not a duplicate: it is refused.
	_, err = tr.Check(sequence.Batch{ProducerID: 7, Partition: 2, FirstSeq: 9, LastSeq: 9}, now)
	var oe *sequence.OutOfOrderError
	if errors.As(err, &oe) {
		fmt.Printf("gap:   expected %d, got %d\n", oe.Expected, oe.Got)
	}
	// Output:
	// send:  duplicate=false offset=0
	// retry: duplicate=true offset=0
	// records in partition 2: 1
	// gap:   expected 6, got 9
}

// A restarted producer gets a higher epoch and starts again at 0; the old
// instance is fenced.
func ExampleTracker_Check_fencing() {
	tr, err := sequence.NewTracker()
	if err != nil {
		log.Fatal(err)
	}
	now := time.Now()
	for _, b := range []sequence.Batch{
		{ProducerID: 7, Epoch: 0, FirstSeq: 0, LastSeq: 2},
		{ProducerID: 7, Epoch: 1, FirstSeq: 0, LastSeq: 0}, // the new instance
		{ProducerID: 7, Epoch: 0, FirstSeq: 3, LastSeq: 3}, // the old one, still running
	} {
		v, err := tr.Check(b, now)
		fmt.Printf("epoch %d seq %d: offset=%d fenced=%v\n", b.Epoch, b.FirstSeq, v.Offset, errors.Is(err, sequence.ErrFenced))
	}
	// Output:
	// epoch 0 seq 0: offset=0 fenced=false
	// epoch 1 seq 0: offset=3 fenced=false
	// epoch 0 seq 3: offset=0 fenced=true
}

// Saving and restoring a tracker's state, for example across a restart.
func ExampleTracker_Snapshot() {
	tr, err := sequence.NewTracker()
	if err != nil {
		log.Fatal(err)
	}
	now := time.Now()
	b := sequence.Batch{ProducerID: 7, Partition: 2, FirstSeq: 5, LastSeq: 5, Timestamp: now}
	if _, err := tr.Check(b, now); err != nil {
		log.Fatal(err)
	}
	snap := tr.Snapshot() // write it durably before acknowledging

	restarted, err := sequence.NewTracker()
	if err != nil {
		log.Fatal(err)
	}
	if err := restarted.Restore(snap); err != nil {
		log.Fatal(err)
	}
	v, err := restarted.Check(b, now)
	fmt.Println(v.Duplicate, v.Offset, err)
	// Output:
	// true 0 <nil>
}

// A consumer that keeps one mark per producer instead of one key per
// message. Redeliveries are duplicates; a gap is refused.
func ExampleHighWater() {
	h := sequence.NewHighWater()
	for _, seq := range []int32{0, 1, 1, 0, 2, 4} {
		apply, err := h.Accept(7, 0, 2, seq)
		fmt.Printf("seq %d: apply=%v err=%v\n", seq, apply, err)
	}
	// Output:
	// seq 0: apply=true err=<nil>
	// seq 1: apply=true err=<nil>
	// seq 1: apply=false err=<nil>
	// seq 0: apply=false err=<nil>
	// seq 2: apply=true err=<nil>
	// seq 4: apply=false err=sequence: out of order sequence: expected 3, got 4
}

// The mark commits in the same transaction as the consumer's effect, here a
// balance update on SQLite.
func ExampleSQLMarks_Advance() {
	dir, err := os.MkdirTemp("", "idem-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", sqldialect.SQLiteDSN(filepath.Join(dir, "app.db")))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	marks, err := sequence.NewSQLMarks(sqldialect.SQLite, "wallet-credits")
	if err != nil {
		log.Fatal(err)
	}
	if err := marks.Migrate(ctx, db); err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE wallets (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL); INSERT INTO wallets VALUES (42, 0)"); err != nil {
		log.Fatal(err)
	}

	credit := func(producer int64, epoch int16, partition, seq int32, amount int) (bool, error) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return false, err
		}
		defer tx.Rollback() // no-op after Commit
		applied, err := marks.Advance(ctx, tx, producer, epoch, partition, seq)
		if err != nil || !applied {
			return false, err // duplicate (nil) or refused: nothing to do
		}
		if _, err := tx.ExecContext(ctx, "UPDATE wallets SET balance = balance + ? WHERE id = 42", amount); err != nil {
			return false, err
		}
		return true, tx.Commit()
	}

	// Message seq 5 is delivered twice (the consumer crashed before its ack).
	for _, seq := range []int32{5, 5, 6} {
		applied, err := credit(7, 0, 2, seq, 50)
		if err != nil {
			log.Fatal(err)
		}
		var balance int
		if err := db.QueryRowContext(ctx, "SELECT balance FROM wallets WHERE id = 42").Scan(&balance); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("seq %d: applied=%v balance=%d\n", seq, applied, balance)
	}
	// Output:
	// seq 5: applied=true balance=50
	// seq 5: applied=false balance=50
	// seq 6: applied=true balance=100
}
