package idemkafka_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/idemkafka"
	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/sqldialect"
)

func TestMain(m *testing.M) {
	code := testenv.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// cluster starts a one-broker kfake cluster with the given topics (partitions
// each) and a dead-letter topic "dlq".
func cluster(t testing.TB, partitions int32, topics ...string) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topics...), kfake.SeedTopics(1, "dlq"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func client(t testing.TB, c *kfake.Cluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// produce writes records with the given ids (HeaderID) to topic, value = id,
// spread over partitions by key = id. An empty id produces no header.
func produce(t testing.TB, c *kfake.Cluster, topic string, ids ...string) {
	t.Helper()
	cl := client(t, c)
	p, err := idemkafka.NewProducer(cl)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, id := range ids {
		r := &kgo.Record{Topic: topic, Key: []byte(id), Value: []byte(id)}
		if id == "" {
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := p.Produce(ctx, id, r); err != nil {
			t.Fatal(err)
		}
	}
}

// groupOpts are the client options of a test consumer.
func groupOpts(c *kfake.Cluster, group string, topics ...string) []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100 * time.Millisecond),
		kgo.HeartbeatInterval(100 * time.Millisecond),
	}
}

// effects is a table of applied effects without a unique constraint, so a
// double application shows as two rows.
type effects struct {
	db *sql.DB
}

func newEffects(t testing.TB, db *sql.DB) *effects {
	t.Helper()
	if _, err := db.Exec(`CREATE TABLE effects (id TEXT NOT NULL, consumer TEXT NOT NULL DEFAULT '')`); err != nil {
		t.Fatal(err)
	}
	return &effects{db: db}
}

// handler records the record's value as an effect.
func (e *effects) handler(consumer string) idemkafka.Handler {
	return func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO effects (id, consumer) VALUES (?, ?)`, string(r.Value), consumer)
		return err
	}
}

// counts returns id → number of times applied.
func (e *effects) counts(t testing.TB) map[string]int {
	t.Helper()
	rows, err := e.db.Query(`SELECT id, COUNT(*) FROM effects GROUP BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		out[id] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// requireOnce fails unless every id was applied exactly once and nothing else.
func (e *effects) requireOnce(t testing.TB, ids []string) {
	t.Helper()
	got := e.counts(t)
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
		if got[id] != 1 {
			t.Errorf("effect %q applied %d times, want 1", id, got[id])
		}
	}
	for id, n := range got {
		if !want[id] {
			t.Errorf("unexpected effect %q applied %d times", id, n)
		}
	}
}

func newInbox(t testing.TB, db *sql.DB, group string) *inbox.Inbox {
	t.Helper()
	in, err := inbox.New(db, sqldialect.SQLite, group)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return in
}

// tally counts outcomes reported by WithObserver.
type tally struct {
	mu sync.Mutex
	n  map[idem.Outcome]int
}

func newTally() *tally { return &tally{n: map[idem.Outcome]int{}} }

func (ta *tally) option() idemkafka.Option {
	return idemkafka.WithObserver(func(e idemkafka.Event) {
		ta.mu.Lock()
		ta.n[e.Outcome]++
		ta.mu.Unlock()
	})
}

func (ta *tally) get(o idem.Outcome) int {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	return ta.n[o]
}

func (ta *tally) total() int {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	return ta.n[idem.Applied] + ta.n[idem.Duplicate] + ta.n[idem.DeadLettered] // final outcomes, not retries
}

// waitFor polls cond until it holds or 20 s pass.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// running starts c.Run (a Consumer or a TransactConsumer) in a goroutine;
// the returned stop cancels it, waits, closes c and returns Run's error.
func running(t testing.TB, c interface {
	Run(context.Context) error
	Close()
}) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			err = <-errc
			c.Close()
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// committed returns the group's committed offset per partition of topic.
func committed(t testing.TB, c *kfake.Cluster, group, topic string) map[int32]int64 {
	t.Helper()
	adm := kadm.NewClient(client(t, c))
	resp, err := adm.FetchOffsets(context.Background(), group)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	for p, o := range resp[topic] {
		if o.Err != nil {
			t.Fatalf("offset %s/%d: %v", topic, p, o.Err)
		}
		out[p] = o.At
	}
	return out
}

// endOffsets returns topic's log end offset per partition.
func endOffsets(t testing.TB, c *kfake.Cluster, topic string) map[int32]int64 {
	t.Helper()
	adm := kadm.NewClient(client(t, c))
	resp, err := adm.ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	resp.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return out
}
