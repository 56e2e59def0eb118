package idemkafka_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/idemkafka"
	"github.com/idem-go/idem/adapters/internal/consume/consumetest"
	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/internal/testsupport/inboxtest"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/outbox"
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
	p := newProducer(t, cl)
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
	return countRows(t, e.db, `SELECT id, COUNT(*) FROM effects GROUP BY id`)
}

// countRows returns the rows of query, pairs of a text and a number, as a
// map.
func countRows(t testing.TB, db *sql.DB, query string) map[string]int {
	t.Helper()
	var js string
	if err := db.QueryRow(`WITH q(k, n) AS (` + query + `) SELECT COALESCE(json_group_object(k, n), '{}') FROM q`).Scan(&js); err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	if err := json.Unmarshal([]byte(js), &out); err != nil {
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

// newInbox returns a migrated SQLite inbox of db for consumer group.
func newInbox(t testing.TB, db *sql.DB, group string, opts ...inbox.Option) *inbox.Inbox {
	t.Helper()
	return inboxtest.Migrated(t, db, sqldialect.SQLite, group, opts...)
}

// newProducer wraps cl in a Producer.
func newProducer(t testing.TB, cl *kgo.Client) *idemkafka.Producer {
	t.Helper()
	p, err := idemkafka.NewProducer(cl)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// newOutbox returns a migrated SQLite outbox in db.
func newOutbox(t testing.TB, db *sql.DB) *outbox.Outbox {
	t.Helper()
	o, err := outbox.New(sqldialect.SQLite)
	if err == nil {
		err = o.Migrate(context.Background(), db)
	}
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// tally collects the events reported by WithObserver.
type tally struct {
	consumetest.Events[*kgo.Record]
}

func newTally() *tally { return &tally{} }

func (ta *tally) option() idemkafka.Option { return idemkafka.WithObserver(ta.Observe) }

func (ta *tally) get(o idem.Outcome) int { return ta.Count(o) }

// want checks the count of each outcome in want; what, if not empty, says
// which consumer or step the counts are of.
func (ta *tally) want(t testing.TB, what string, want map[idem.Outcome]int) {
	t.Helper()
	if what != "" {
		what += ": "
	}
	for _, o := range slices.Sorted(maps.Keys(want)) {
		if got := ta.Count(o); got != want[o] {
			t.Errorf("%s%d %v outcomes, want %d", what, got, o, want[o])
		}
	}
}

// total counts the final outcomes (not the retries).
func (ta *tally) total() int {
	return ta.Count(idem.Applied) + ta.Count(idem.Duplicate) + ta.Count(idem.DeadLettered)
}

// waitFor polls cond until it holds or 20 s pass.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testenv.WaitFor(t, 20*time.Second, what, cond)
}

// running starts c.Run in a goroutine; the returned stop cancels it, waits,
// closes c and returns Run's error. It runs at cleanup too.
func running(t testing.TB, c runner) (stop func() error) {
	t.Helper()
	r := consumetest.Start(c.Run)
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			err = r.Stop(t)
			c.Close()
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// offsets returns the group's committed offset and topic's log end offset
// per partition.
func offsets(t testing.TB, c *kfake.Cluster, group, topic string) (committed, end map[int32]int64) {
	t.Helper()
	adm := kadm.NewClient(client(t, c))
	ctx := context.Background()
	co, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	eo, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	committed, end = map[int32]int64{}, map[int32]int64{}
	for p, o := range co[topic] {
		if o.Err != nil {
			t.Fatalf("offset %s/%d: %v", topic, p, o.Err)
		}
		committed[p] = o.At
	}
	eo.Each(func(o kadm.ListedOffset) { end[o.Partition] = o.Offset })
	return committed, end
}

// committed returns the group's committed offset per partition of topic.
func committed(t testing.TB, c *kfake.Cluster, group, topic string) map[int32]int64 {
	t.Helper()
	got, _ := offsets(t, c, group, topic)
	return got
}

func requireCommittedToEnd(t testing.TB, c *kfake.Cluster, group, topic string) {
	t.Helper()
	got, end := offsets(t, c, group, topic)
	for p, e := range end {
		if e > 0 && got[p] != e {
			t.Errorf("partition %d: committed %d, log end %d", p, got[p], e)
		}
	}
}

// blockCommits makes the broker reject every OffsetCommit while on is set:
// from Kafka's point of view the consumer died before committing.
func blockCommits(c *kfake.Cluster, on *atomic.Bool) {
	c.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !on.Load() {
			return nil, nil, false
		}
		r := req.(*kmsg.OffsetCommitRequest)
		resp := r.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, rt := range r.Topics {
			st := kmsg.NewOffsetCommitResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetCommitResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.OffsetMetadataTooLarge.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
}

// requireClosed closes con and fails unless Run then returns an error
// wrapping idem.ErrClosed.
func requireClosed(t testing.TB, con runner) {
	t.Helper()
	con.Close()
	if err := con.Run(context.Background()); !errors.Is(err, idem.ErrClosed) {
		t.Errorf("Run after Close = %v, want ErrClosed", err)
	}
}

// runner is any consumer of the package.
type runner interface {
	Run(context.Context) error
	Close()
}

// fixture is one test's kfake cluster with the topic "orders" and the
// dead-letter topic "dlq", the records produced to "orders", and a SQLite
// database with the effects table. Consumers built from it are of group "g".
type fixture struct {
	t     testing.TB
	c     *kfake.Cluster
	db    *sql.DB
	eff   *effects
	block atomic.Bool // while set, the broker rejects offset commits
}

// newFixture produces the records with the given ids (see produce) to
// "orders", which has the given number of partitions.
func newFixture(t testing.TB, partitions int32, ids ...string) *fixture {
	t.Helper()
	f := &fixture{t: t, c: cluster(t, partitions, "orders")}
	blockCommits(f.c, &f.block)
	produce(t, f.c, "orders", ids...)
	f.db = testenv.SQLite(t)
	f.eff = newEffects(t, f.db)
	return f
}

// consumer builds a Consumer on a fresh inbox handle of f's database.
func (f *fixture) consumer(h idemkafka.Handler, opts ...idemkafka.Option) *idemkafka.Consumer {
	f.t.Helper()
	con, err := idemkafka.NewConsumer(newInbox(f.t, f.db, "g"), h, groupOpts(f.c, "g", "orders"), opts...)
	if err != nil {
		f.t.Fatal(err)
	}
	return con
}

// offsetConsumer builds and migrates an OffsetConsumer on f's database.
func (f *fixture) offsetConsumer(h idemkafka.Handler, opts ...idemkafka.Option) *idemkafka.OffsetConsumer {
	f.t.Helper()
	return f.offsetConsumerWith(nil, h, opts...)
}

// offsetConsumerWith is offsetConsumer with more client options.
func (f *fixture) offsetConsumerWith(kopts []kgo.Opt, h idemkafka.Handler, opts ...idemkafka.Option) *idemkafka.OffsetConsumer {
	f.t.Helper()
	con, err := idemkafka.NewOffsetConsumer(f.db, sqldialect.SQLite, h, append(groupOpts(f.c, "g", "orders"), kopts...), opts...)
	if err == nil {
		err = con.Migrate(context.Background())
	}
	if err != nil {
		f.t.Fatal(err)
	}
	return con
}

// keystoreConsumer builds a KeystoreConsumer over s.
func (f *fixture) keystoreConsumer(s keystore.Store, h idemkafka.KeystoreHandler, opts ...idemkafka.Option) *idemkafka.KeystoreConsumer {
	f.t.Helper()
	con, err := idemkafka.NewKeystoreConsumer(s, h, groupOpts(f.c, "g", "orders"), opts...)
	if err != nil {
		f.t.Fatal(err)
	}
	return con
}

// fastRetries allows n attempts a record, a few milliseconds apart.
func fastRetries(n int) idemkafka.Option {
	return join(idemkafka.WithMaxAttempts(n), idemkafka.WithBackoff(time.Millisecond, 5*time.Millisecond))
}

// join combines options into one; it is generic because the options' config
// type is unexported.
func join[C any, O ~func(*C) error](opts ...O) O {
	return func(c *C) error {
		for _, o := range opts {
			if err := o(c); err != nil {
				return err
			}
		}
		return nil
	}
}

// requireCommittedToEnd fails unless group "g" committed "orders" to its end.
func (f *fixture) requireCommittedToEnd() {
	f.t.Helper()
	requireCommittedToEnd(f.t, f.c, "g", "orders")
}

// runCommitsRejected runs con, while the broker rejects every offset commit,
// until ta has counted n final outcomes (as if the process died before
// committing), and fails if an offset was committed nevertheless.
func (f *fixture) runCommitsRejected(con runner, ta *tally, n int) {
	f.t.Helper()
	f.block.Store(true)
	defer f.block.Store(false)
	_ = runUntil(f.t, con, ta, n)
	if got := committed(f.t, f.c, "g", "orders"); len(got) != 0 {
		f.t.Fatalf("offsets committed despite the broker rejecting commits: %v", got)
	}
}

// requireNotPast fails if group "g" committed partition 0 past offset.
func (f *fixture) requireNotPast(offset int64) {
	f.t.Helper()
	if got := committed(f.t, f.c, "g", "orders"); got[0] > offset {
		f.t.Errorf("committed offset %d moved past the record at %d", got[0], offset)
	}
}

// runUntil runs con until ta has counted n final outcomes, then stops and
// closes it, and returns Run's error.
func runUntil(t testing.TB, con runner, ta *tally, n int) error {
	t.Helper()
	stop := running(t, con)
	waitFor(t, fmt.Sprintf("%d outcomes", n), func() bool { return ta.total() == n })
	return stop()
}

// runToError runs con until Run returns by itself (within 30 s), closes it,
// and returns Run's error.
func runToError(t testing.TB, con runner) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := con.Run(ctx)
	con.Close()
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatal("Run did not return by itself within 30 s")
	}
	return err
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return out
}

// sender is a KeystoreHandler that counts the records it sends and fails the
// first attempt at one record, as a side effect outside the database would.
type sender struct {
	mu     sync.Mutex
	failOn string // the record value whose first attempt fails with err
	err    error
	failed bool
	sent   map[string]int
}

func newSender(failOn string, err error) *sender {
	return &sender{failOn: failOn, err: err, sent: map[string]int{}}
}

func (s *sender) handle(_ context.Context, r *kgo.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if string(r.Value) == s.failOn && !s.failed {
		s.failed = true
		return s.err
	}
	s.sent[string(r.Value)]++
	return nil
}

// requireOnce fails t unless each of ids was sent exactly once.
func (s *sender) requireOnce(t testing.TB, ids []string) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		if s.sent[id] != 1 {
			t.Errorf("%s sent %d times, want 1", id, s.sent[id])
		}
	}
}
