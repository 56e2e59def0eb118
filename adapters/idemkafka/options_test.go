package idemkafka_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/idemkafka"
	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/memstore"
	"github.com/idem-go/idem/sqldialect"
)

func TestOptionsValidated(t *testing.T) {
	t.Parallel()
	db := testenv.SQLite(t)
	in := newInbox(t, db, "g")
	h := func(context.Context, *sql.Tx, *kgo.Record) error { return nil }
	kopts := []kgo.Opt{kgo.SeedBrokers("127.0.0.1:1"), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t")}
	bad := map[string][]idemkafka.Option{
		"nil option":      {nil},
		"key header":      {idemkafka.WithKey(idemkafka.HeaderKey(""))},
		"key func":        {idemkafka.WithKey(nil)},
		"fingerprint":     {idemkafka.WithFingerprint(nil)},
		"missing policy":  {idemkafka.WithMissingKey(0)},
		"retries":         {idemkafka.WithMaxAttempts(0), idemkafka.WithBackoff(time.Millisecond, time.Second)},
		"backoff":         {idemkafka.WithMaxAttempts(2), idemkafka.WithBackoff(time.Second, time.Millisecond)},
		"dlq":             {idemkafka.WithDeadLetter("")},
		"max poll":        {idemkafka.WithBatchSize(0)},
		"offsets table":   {idemkafka.WithOffsetsTable("x; DROP TABLE y")},
		"logger":          {idemkafka.WithLogger(nil)},
		"outcome":         {idemkafka.WithObserver(nil)},
		"keystore option": {idemkafka.WithKeystoreOptions(nil)},
		"set handler":     {idemkafka.WithSetHandler(nil)},
		"not for inbox":   {idemkafka.WithKeystoreOptions(keystore.WithLease(time.Second))},
		"table for inbox": {idemkafka.WithOffsetsTable("offsets")},
		"later bad wins":  {idemkafka.WithMaxAttempts(2), idemkafka.WithBackoff(time.Millisecond, time.Second), idemkafka.WithBatchSize(-5)},
		"first bad fails": {idemkafka.WithBatchSize(-5), idemkafka.WithMaxAttempts(2), idemkafka.WithBackoff(time.Millisecond, time.Second)},
	}
	for name, opts := range bad {
		if _, err := idemkafka.NewConsumer(in, h, kopts, opts...); !errors.Is(err, idem.ErrInvalidOption) || !strings.HasPrefix(err.Error(), "idemkafka: ") {
			t.Errorf("%s: err = %v, want idemkafka-prefixed ErrInvalidOption", name, err)
		}
	}
	if _, err := idemkafka.NewConsumer(nil, h, kopts); !errors.Is(err, idem.ErrInvalidOption) {
		t.Errorf("nil inbox: %v", err)
	}
	if _, err := idemkafka.NewConsumer(in, nil, kopts); !errors.Is(err, idem.ErrInvalidOption) {
		t.Errorf("nil handler: %v", err)
	}
	if _, err := idemkafka.NewConsumer(in, h, kopts[:1]); !errors.Is(err, idem.ErrInvalidOption) {
		t.Errorf("no group: %v", err)
	}
	if _, err := idemkafka.NewOffsetConsumer(db, sqldialect.MySQL, h, kopts); !errors.Is(err, idem.ErrInvalidOption) {
		t.Errorf("MySQL offsets: %v", err)
	}
	if _, err := idemkafka.NewKeystoreConsumer(nil, func(context.Context, *kgo.Record) error { return nil }, kopts); !errors.Is(err, idem.ErrInvalidOption) {
		t.Errorf("nil store: %v", err)
	}
	store, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	ks := func(context.Context, *kgo.Record) error { return nil }
	set := idemkafka.WithSetHandler(func(context.Context, *sql.Tx, []*kgo.Record) error { return nil })
	for name, build := range map[string]func() error{
		"offsets with a key": func() error {
			_, err := idemkafka.NewOffsetConsumer(db, sqldialect.SQLite, h, kopts, idemkafka.WithKey(idemkafka.OffsetKey))
			return err
		},
		"offsets with a set handler": func() error {
			_, err := idemkafka.NewOffsetConsumer(db, sqldialect.SQLite, h, kopts, set)
			return err
		},
		"offsets with keystore options": func() error {
			_, err := idemkafka.NewOffsetConsumer(db, sqldialect.SQLite, h, kopts, idemkafka.WithKeystoreOptions())
			return err
		},
		"keystore with a set handler": func() error {
			_, err := idemkafka.NewKeystoreConsumer(store, ks, kopts, set)
			return err
		},
		"keystore with an offsets table": func() error {
			_, err := idemkafka.NewKeystoreConsumer(store, ks, kopts, idemkafka.WithOffsetsTable("t"))
			return err
		},
	} {
		if err := build(); !errors.Is(err, idem.ErrInvalidOption) || !strings.Contains(err.Error(), "does not apply") {
			t.Errorf("%s: err = %v, want an option that does not apply", name, err)
		}
	}
	oc, err := idemkafka.NewOffsetConsumer(db, sqldialect.SQLite, h, kopts, idemkafka.WithOffsetsTable("kafka_offsets"))
	if err != nil {
		t.Fatal(err)
	}
	if s := oc.SchemaSQL(); len(s) != 1 || !strings.Contains(s[0], "CREATE TABLE IF NOT EXISTS kafka_offsets ") {
		t.Errorf("SchemaSQL = %q", s)
	}
	if err := oc.Migrate(context.Background()); err != nil {
		t.Error(err)
	}
	if _, err := db.Exec(`SELECT group_id, topic, partition_id, next_offset FROM kafka_offsets`); err != nil {
		t.Errorf("offsets table after Migrate: %v", err)
	}
	requireClosed(t, oc)
	kc, err := idemkafka.NewKeystoreConsumer(store, ks, kopts, idemkafka.WithKeystoreOptions(keystore.WithLease(time.Minute)))
	if err != nil {
		t.Fatal(err)
	}
	requireClosed(t, kc)
	setOnly, err := idemkafka.NewConsumer(in, nil, kopts, set) // the set handler needs no per-record Handler
	if err != nil {
		t.Fatal(err)
	}
	requireClosed(t, setOnly)
	c, err := idemkafka.NewConsumer(in, h, kopts)
	if err != nil {
		t.Fatal(err)
	}
	requireClosed(t, c)
}

func TestKeys(t *testing.T) {
	t.Parallel()
	r := &kgo.Record{Topic: "orders", Partition: 3, Offset: 42}
	k, err := idemkafka.OffsetKey(r)
	if err != nil || k != "orders/3/00000000000000000042" {
		t.Errorf("OffsetKey = %q, %v", k, err)
	}
	long := &kgo.Record{Topic: strings.Repeat("t", 249), Offset: 1}
	if k, err := idemkafka.OffsetKey(long); err != nil || len(k) > idem.MaxKeyLen {
		t.Errorf("long topic: %q, %v", k, err)
	}
	idemkafka.SetID(r, "a")
	idemkafka.SetID(r, "b") // replaces
	if len(r.Headers) != 1 || string(r.Headers[0].Value) != "b" {
		t.Errorf("headers after SetID twice: %v", r.Headers)
	}
	idemkafka.SetSequence(r, 7, 2, 2147483647)
	p, e, s, ok := idemkafka.SequenceFrom(r)
	if !ok || p != 7 || e != 2 || s != 2147483647 {
		t.Errorf("SequenceFrom = %d %d %d %v", p, e, s, ok)
	}
	if _, _, _, ok := idemkafka.SequenceFrom(&kgo.Record{}); ok {
		t.Error("SequenceFrom of a bare record reported ok")
	}
}

func TestProducerRequiresIdempotence(t *testing.T) {
	t.Parallel()
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"), kgo.DisableIdempotentWrite())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := idemkafka.NewProducer(cl); !errors.Is(err, idem.ErrInvalidOption) {
		t.Errorf("NewProducer with idempotence off: %v", err)
	}
	cl2, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl2.Close()
	p, err := idemkafka.NewProducer(cl2)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Produce(context.Background(), "", &kgo.Record{Topic: "t"}); !errors.Is(err, idem.ErrInvalidKey) {
		t.Errorf("empty id: %v", err)
	}
}
