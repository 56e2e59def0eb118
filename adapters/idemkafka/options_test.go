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
	"github.com/idem-go/idem/internal/testsupport/dbtest"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/sqldialect"
	"github.com/idem-go/idem/window/diskwindow"
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
	if _, err := idemkafka.NewWindowConsumer(nil, func(context.Context, *kgo.Record) error { return nil }, kopts); !errors.Is(err, idem.ErrInvalidOption) {
		t.Errorf("nil dedup set: %v", err)
	}
	if _, err := idemkafka.NewWindowConsumer(dedupSet(t), nil, kopts); !errors.Is(err, idem.ErrInvalidOption) {
		t.Errorf("nil window handler: %v", err)
	}
	store := dbtest.MemStore(t)
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
		"window with keystore options": func() error {
			_, err := idemkafka.NewWindowConsumer(dedupSet(t), ks, kopts, idemkafka.WithKeystoreOptions())
			return err
		},
		"window with a fingerprint": func() error {
			_, err := idemkafka.NewWindowConsumer(dedupSet(t), ks, kopts, idemkafka.WithFingerprint(func(*kgo.Record) []byte { return nil }))
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
	p := newProducer(t, cl2)
	if err := p.Produce(context.Background(), "", &kgo.Record{Topic: "t"}); !errors.Is(err, idem.ErrInvalidKey) {
		t.Errorf("empty id: %v", err)
	}
}

func TestTransactOptions(t *testing.T) {
	t.Parallel()
	c := cluster(t, 1, "in")
	ok := func(context.Context, *kgo.Record) ([]*kgo.Record, error) { return nil, nil }
	kopts := groupOpts(c, "g", "in")
	cases := []struct {
		name  string
		id    string
		h     idemkafka.TransactHandler
		kopts []kgo.Opt
		opts  []idemkafka.Option
	}{
		{name: "empty id", id: "", h: ok, kopts: kopts},
		{name: "id with a trailing space", id: "inst-0 ", h: ok, kopts: kopts},
		{name: "id with NUL", id: "inst\x000", h: ok, kopts: kopts},
		{name: "id not UTF-8", id: "inst-\xff", h: ok, kopts: kopts},
		{name: "id too long", id: strings.Repeat("i", idem.MaxKeyLen+1), h: ok, kopts: kopts},
		{name: "nil handler", id: "inst-0", kopts: kopts},
		{name: "no group", id: "inst-0", h: ok, kopts: []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("in")}},
		{name: "nil option", id: "inst-0", h: ok, kopts: kopts, opts: []idemkafka.Option{nil}},
		{name: "key option", id: "inst-0", h: ok, kopts: kopts, opts: []idemkafka.Option{idemkafka.WithKey(idemkafka.OffsetKey)}},
		{name: "key header", id: "inst-0", h: ok, kopts: kopts, opts: []idemkafka.Option{idemkafka.WithKey(idemkafka.HeaderKey("k"))}},
		{name: "missing key", id: "inst-0", h: ok, kopts: kopts, opts: []idemkafka.Option{idemkafka.WithMissingKey(idemkafka.StopOnMissing)}},
		{name: "offsets table", id: "inst-0", h: ok, kopts: kopts, opts: []idemkafka.Option{idemkafka.WithOffsetsTable("t")}},
		{name: "fingerprint", id: "inst-0", h: ok, kopts: kopts, opts: []idemkafka.Option{idemkafka.WithFingerprint(func(*kgo.Record) []byte { return nil })}},
		{name: "bad retries", id: "inst-0", h: ok, kopts: kopts, opts: []idemkafka.Option{idemkafka.WithMaxAttempts(0), idemkafka.WithBackoff(time.Second, time.Second)}},
	}
	for _, tc := range cases {
		if tc.name == "no group" {
			// franz-go refuses a transact session without a group.
			_, err := idemkafka.NewTransactional(tc.id, tc.h, tc.kopts)
			if !errors.Is(err, idem.ErrInvalidOption) {
				t.Errorf("%s: err = %v, want ErrInvalidOption", tc.name, err)
			}
			continue
		}
		if c, err := idemkafka.NewTransactional(tc.id, tc.h, tc.kopts, tc.opts...); !errors.Is(err, idem.ErrInvalidOption) {
			if c != nil {
				c.Close()
			}
			t.Errorf("%s: err = %v, want ErrInvalidOption", tc.name, err)
		}
	}
	con, err := idemkafka.NewTransactional("inst-0", ok, kopts, idemkafka.WithDeadLetter("dlq"),
		idemkafka.WithBatchSize(5), idemkafka.WithMaxAttempts(2), idemkafka.WithBackoff(time.Millisecond, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer con.Close()
	if con.TransactionalID() != "inst-0" {
		t.Errorf("TransactionalID = %q", con.TransactionalID())
	}
	if id, _ := con.Client().OptValue(kgo.TransactionalID).(string); id != "inst-0" {
		t.Errorf("client transactional id %q", id)
	}
	requireClosed(t, con)
}

// dedupSet is a disk-backed dedup set in a temporary directory.
func dedupSet(t *testing.T) *diskwindow.Set {
	t.Helper()
	s, err := diskwindow.Open(t.TempDir(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
