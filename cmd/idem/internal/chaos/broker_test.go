package chaos

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestScheduleIsAFunctionOfTheSeed(t *testing.T) {
	s := schedule{seed: 42, dupRate: 0.1, crashRate: 0.05, ackLoss: 0.05, reord: 0.1}
	a, b := s.publishOrder(5000), s.publishOrder(5000)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seed, different publication order")
	}
	other := s
	other.seed = 43
	if reflect.DeepEqual(a, other.publishOrder(5000)) {
		t.Fatal("different seeds, same publication order")
	}
	if !reflect.DeepEqual(s.messages(100, 8), s.messages(100, 8)) {
		t.Fatal("same seed, different messages")
	}
	same := s // a fresh value: no state is carried between calls
	for id := uint64(1); id < 2000; id++ {
		for attempt := 1; attempt <= faultyAttempts+1; attempt++ {
			if s.faultFor(id, attempt, twoPoints) != same.faultFor(id, attempt, twoPoints) {
				t.Fatalf("fault of message %d attempt %d is not deterministic", id, attempt)
			}
		}
	}
}

func TestPublishOrderHasEveryMessageAndItsDuplicates(t *testing.T) {
	s := schedule{seed: 7, dupRate: 0.2, reord: 0.3}
	const n = 20000
	order := s.publishOrder(n)
	originals, dups := make([]int, n), 0
	displaced := 0
	next := 0
	for _, e := range order {
		if e.dup {
			dups++
			continue
		}
		originals[e.msg]++
		if int(e.msg) != next {
			displaced++
		}
		next = int(e.msg) + 1
	}
	for i, c := range originals {
		if c != 1 {
			t.Fatalf("message %d published %d times", i+1, c)
		}
	}
	if dups < n*15/100 || dups > n*25/100 {
		t.Errorf("%d duplicates for a 20%% rate", dups)
	}
	if displaced < n/10 {
		t.Errorf("only %d messages out of place for a 30%% reorder rate", displaced)
	}
}

func TestFaultRates(t *testing.T) {
	s := schedule{seed: 3, crashRate: 0.1, ackLoss: 0.05}
	var die, kill, lost int
	points := map[point]int{}
	const n = 100000
	for id := uint64(1); id <= n; id++ {
		f := s.faultFor(id, 1, twoPoints)
		if f.die != pointNone {
			die++
			points[f.die]++
		}
		if f.kill {
			kill++
			if f.killDelay < 0 || f.killDelay >= maxKillDelay {
				t.Fatalf("kill delay %v", f.killDelay)
			}
		}
		if f.ackLost {
			lost++
		}
		if g := s.faultFor(id, faultyAttempts+1, twoPoints); g != (fault{}) {
			t.Fatalf("attempt %d still faulty: %+v", faultyAttempts+1, g)
		}
	}
	near := func(got int, want float64) bool { return float64(got) > want*0.9 && float64(got) < want*1.1 }
	if !near(die+kill, n*0.1) || !near(kill, n*0.1*harnessKillShare) || !near(lost, n*0.05) {
		t.Errorf("die %d kill %d ack lost %d of %d", die, kill, lost, n)
	}
	for _, p := range twoPoints {
		if !near(points[p], float64(die)/4) {
			t.Errorf("point %v chosen %d times of %d", p, points[p], die)
		}
	}
}

func TestDeque(t *testing.T) {
	var q deque
	for i := range 100 {
		q.pushBack(entry{msg: uint32(i)})
	}
	q.pushFront(entry{msg: 1000})
	if e, _ := q.popFront(); e.msg != 1000 {
		t.Fatalf("front = %d", e.msg)
	}
	for i := range 100 {
		if e, ok := q.popFront(); !ok || e.msg != uint32(i) {
			t.Fatalf("pop %d = %d, %v", i, e.msg, ok)
		}
	}
	if _, ok := q.popFront(); ok || q.len() != 0 {
		t.Fatal("deque not empty")
	}
}

func TestBrokerRedeliversWhatIsNotAcked(t *testing.T) {
	s := schedule{seed: 1}
	msgs := s.messages(3, 1)
	b := newBroker(msgs, s.publishOrder(3), s, onePoints, time.Second, 1)
	p, q := &proc{held: map[uint64]struct{}{}}, &proc{held: map[uint64]struct{}{}}
	now := time.Unix(1000, 0)
	d1, _, _ := b.next(p, now)
	d2, _, _ := b.next(p, now)
	d3, _, _ := b.next(q, now)
	p.held[d1.tag], p.held[d2.tag] = struct{}{}, struct{}{}
	b.ack(q, d3.tag, outcomeApplied)
	b.ack(q, d1.tag, outcomeApplied) // not q's: ignored
	if b.pending != 2 || b.c.lateAcks != 1 {
		t.Fatalf("pending %d, late acks %d", b.pending, b.c.lateAcks)
	}
	b.lost(p, p.held) // p died: both back, in the order they were sent
	r1, _, _ := b.next(q, now)
	r2, _, _ := b.next(q, now)
	if r1.msg != d1.msg || r2.msg != d2.msg {
		t.Fatalf("redelivered %d, %d; want %d, %d", r1.msg, r2.msg, d1.msg, d2.msg)
	}
	b.nack(q, r1.tag, nackGap, now)
	if _, _, ok := b.next(q, now); ok {
		t.Fatal("a nacked delivery came back before its backoff")
	}
	b.tick(now.Add(time.Second))
	r3, _, ok := b.next(q, now)
	if !ok || r3.msg != r1.msg {
		t.Fatalf("after the backoff: %+v, %v", r3, ok)
	}
	b.tick(now.Add(3 * time.Second)) // r2 and r3 time out
	if b.queues[0].len() != 2 || b.c.redelivered != 4 {
		t.Fatalf("queue %d, redelivered %d", b.queues[0].len(), b.c.redelivered)
	}
}

func TestBrokerDropsLostAcks(t *testing.T) {
	s := schedule{seed: 1, ackLoss: 0.5}
	b := newBroker(s.messages(200, 1), s.publishOrder(200), s, onePoints, time.Second, 1)
	p := &proc{held: map[uint64]struct{}{}}
	now := time.Unix(1000, 0)
	for {
		d, _, ok := b.next(p, now)
		if !ok {
			break
		}
		b.ack(p, d.tag, outcomeApplied)
	}
	if b.c.acksLost < 70 || b.c.acksLost > 130 || b.pending != int(b.c.acksLost) {
		t.Fatalf("acks lost %d, pending %d", b.c.acksLost, b.pending)
	}
	b.tick(now.Add(2 * time.Second))
	if b.queues[0].len() != b.pending {
		t.Fatalf("%d queued for %d pending", b.queues[0].len(), b.pending)
	}
}

func TestBrokerRoutesProducersToSlots(t *testing.T) {
	s := schedule{seed: 1, reord: 0.5}
	msgs := s.messages(400, 8)
	b := newBroker(msgs, s.publishOrder(400), s, onePoints, time.Second, 4)
	p := &proc{slot: 2, held: map[uint64]struct{}{}}
	for {
		d, _, ok := b.next(p, time.Now())
		if !ok {
			break
		}
		if d.producer%4 != 2 {
			t.Fatalf("slot 2 got producer %d", d.producer)
		}
	}
}

func TestReportTableAndFailures(t *testing.T) {
	rep := &Report{Seed: 9, Backend: BackendSQLite, Messages: 10, Consumers: 2, Strategies: []strategyResult{
		{Name: "naive", Messages: 10, Applied: 12, Doubled: 2},
		{Name: "idem-inbox", Idem: true, Messages: 10, Applied: 10},
		{Name: "idem-keystore", Idem: true, Messages: 10, Applied: 9, Lost: 1},
	}}
	if got := rep.Failures(); !reflect.DeepEqual(got, []string{"idem-keystore"}) {
		t.Fatalf("failures = %v", got)
	}
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"DOUBLED 2", "exactly once", "LOST 1", "FAILED: idem-keystore"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

func TestStrategiesAreDescribed(t *testing.T) {
	for _, s := range Strategies() {
		if s.How == "" || len(s.points) == 0 || s.Idem != strings.HasPrefix(s.Name, "idem") || (!s.Idem && s.fails == "") {
			t.Errorf("strategy %+v", s)
		}
	}
	if point(9).String() != "Point(9)" || pointBetween.String() != "between" {
		t.Error("Point.String")
	}
}
