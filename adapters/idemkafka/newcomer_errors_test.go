package idemkafka_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/idemkafka"
	"github.com/idem-go/idem/internal/testsupport/dbtest"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/sqldialect"
)

// TestNoConsumerGroupSaysWhatToAdd (issue 28): client options without
// kgo.ConsumerGroup made every consumer fail with franz-go's "invalid
// autocommit options specified when a group was not specified", about an
// option the consumer adds itself. The error now names the options to add.
func TestNoConsumerGroupSaysWhatToAdd(t *testing.T) {
	t.Parallel()
	db := testenv.SQLite(t)
	kopts := []kgo.Opt{kgo.SeedBrokers("127.0.0.1:1"), kgo.ConsumeTopics("orders")}
	store := dbtest.MemStore(t)
	for name, build := range map[string]func() (closer, error){
		"NewConsumer": func() (closer, error) {
			return idemkafka.NewConsumer(newInbox(t, db, "g"), func(context.Context, *sql.Tx, *kgo.Record) error { return nil }, kopts)
		},
		"NewOffsetConsumer": func() (closer, error) {
			return idemkafka.NewOffsetConsumer(db, sqldialect.SQLite, func(context.Context, *sql.Tx, *kgo.Record) error { return nil }, kopts)
		},
		"NewKeystoreConsumer": func() (closer, error) {
			return idemkafka.NewKeystoreConsumer(store, func(context.Context, *kgo.Record) error { return nil }, kopts)
		},
		"NewWindowConsumer": func() (closer, error) {
			return idemkafka.NewWindowConsumer(dedupSet(t), func(context.Context, *kgo.Record) error { return nil }, kopts)
		},
		"NewTransactional": func() (closer, error) {
			return idemkafka.NewTransactional("orders-0", func(context.Context, *kgo.Record) ([]*kgo.Record, error) { return nil, nil }, kopts)
		},
	} {
		c, err := build()
		if err == nil {
			c.Close()
		}
		const want = `idemkafka: the client has no consumer group: add kgo.ConsumerGroup("…") and kgo.ConsumeTopics(…) to kopts`
		if !errors.Is(err, idem.ErrInvalidOption) || err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s without kgo.ConsumerGroup: %v; want ErrInvalidOption starting %q", name, err, want)
		}
	}
}

// TestSecondRunSaysRunsOnce (issue 28): a second Run said "consumer
// closed", although Close was never called. It now says that a consumer
// runs once; after Close, Run still says the consumer is closed. Both match
// idem.ErrClosed.
func TestSecondRunSaysRunsOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	con := f.consumer(f.eff.handler("g"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := con.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("first Run with a cancelled context = %v; want context.Canceled", err)
	}
	err := con.Run(context.Background())
	const want = "idemkafka: Run was already called; a consumer runs once: Close it and build a new one"
	if !errors.Is(err, idem.ErrClosed) || err == nil || err.Error() != want {
		t.Errorf("second Run = %v; want %q (matching idem.ErrClosed)", err, want)
	}
	con.Close()
	if err := con.Run(context.Background()); !errors.Is(err, idem.ErrClosed) || !strings.Contains(err.Error(), "consumer closed") {
		t.Errorf("Run after Close = %v; want \"consumer closed\"", err)
	}
}

// closer is what the constructors return.
type closer interface{ Close() }
