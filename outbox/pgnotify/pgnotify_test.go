package pgnotify_test

import (
	"context"
	"database/sql"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/outbox"
	"github.com/idem-go/idem/outbox/pgnotify"
	"github.com/idem-go/idem/sqldialect"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// With a 1-hour poll, only the notification can wake the relay.
func TestNotificationWakesTheRelay(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	url := testenv.PostgresURL(t)
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithCancel(context.Background())
	o, _ := outbox.New(sqldialect.Postgres)
	if err := o.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	l, err := pgnotify.Listen(ctx, url, o.Channel(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var published atomic.Int32
	r, _ := outbox.NewRelay(db, o, outbox.PublisherFunc(func(ctx context.Context, msgs []outbox.Message) error {
		published.Add(int32(len(msgs)))
		return nil
	}), outbox.WithPoll(time.Hour), outbox.WithWakeup(l.C))
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	time.Sleep(100 * time.Millisecond) // the first round found nothing; now it sleeps
	tx, _ := db.BeginTx(ctx, nil)
	if _, err := o.Add(ctx, tx, outbox.Message{Topic: "t", OrderingKey: "k"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for published.Load() == 0 {
		if time.Since(start) > 10*time.Second {
			t.Fatal("relay not woken by the notification")
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("published %v after commit", time.Since(start))
	cancel()
	<-done
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	db.Close()
}
