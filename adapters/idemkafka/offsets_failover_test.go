package idemkafka_test

import (
	"testing"
)

// The database loses its last commits while the consumer is idle, as a
// failover to a standby that lagged does (database/sql reconnects to the new
// primary silently, so Run does not stop): the stored offset goes back from
// 10 to 5 and the effects of records 5..9 are gone. The next batch must not
// write its offset over the gap: the consumer seeks back to 5 and applies
// 5..9 again, then the new records (issue 29, finding 4).
func TestOffsetsDatabaseLostTail(t *testing.T) {
	t.Parallel()
	wave1 := ids("l1", 10)
	f := newFixture(t, 1, wave1...)
	ta := newTally()
	con := f.offsetConsumer(f.eff.handler("1"), ta.option())
	stop := running(t, con)
	waitFor(t, "wave 1", func() bool { return ta.total() == len(wave1) })
	tx, err := f.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`UPDATE idem_kafka_offsets SET next_offset = 5`,
		`DELETE FROM effects WHERE id >= 'l1-005'`,
	} {
		if _, err := tx.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	wave2 := ids("l2", 5)
	produce(t, f.c, "orders", wave2...)
	all := append(append([]string(nil), wave1...), wave2...)
	waitFor(t, "both waves in the effects table", func() bool { return len(f.eff.counts(t)) == len(all) })
	_ = stop()
	f.eff.requireOnce(t, all)
	var next int64
	if err := f.db.QueryRow(`SELECT next_offset FROM idem_kafka_offsets`).Scan(&next); err != nil || next != int64(len(all)) {
		t.Errorf("stored offset %d (%v), want %d", next, err, len(all))
	}
}
