package idemkafka_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/idemkafka"
)

// A payments → ledger-entries transform: each payment becomes a debit and a
// credit entry, produced in the same Kafka transaction as the payment's
// offset. The first instance fails on the third payment, after producing
// the entries of the first two in the same transaction: the transaction is
// aborted, so a read_committed reader never sees them. The instance starts
// again with the same transactional id and commits all six entries once.
func ExampleTransactConsumer() {
	ctx := context.Background()
	w := newWalletExample() // kfake, in-process
	defer w.close()
	for i, p := range []string{"alice>bob:30", "bob>carol:20", "carol>alice:10"} {
		w.pay(fmt.Sprint("payment-", i), p)
	}

	transform := func(crashAt string) idemkafka.TransactHandler {
		return func(_ context.Context, r *kgo.Record) ([]*kgo.Record, error) {
			payment := string(r.Value)
			if payment == crashAt {
				return nil, idem.Permanent(errors.New("ledger service crashed"))
			}
			from, rest, _ := strings.Cut(payment, ">")
			to, amount, _ := strings.Cut(rest, ":")
			return []*kgo.Record{
				{Topic: "ledger-entries", Key: []byte(from), Value: []byte("debit " + from + " " + amount)},
				{Topic: "ledger-entries", Key: []byte(to), Value: []byte("credit " + to + " " + amount)},
			}, nil
		}
	}
	kopts := w.kopts("ledger")

	// First run: no dead-letter topic, so the failing payment aborts the
	// whole transaction and Run stops.
	first, err := idemkafka.NewTransactional("ledger-0", transform("carol>alice:10"), kopts,
		idemkafka.WithMaxAttempts(1))
	if err != nil {
		log.Fatal(err)
	}
	err = first.Run(ctx)
	first.Close()
	fmt.Println("first run aborted:", errors.Is(err, idemkafka.ErrDeadLetter))

	// The restarted instance, same transactional id.
	runCtx, stop := context.WithCancel(ctx)
	second, err := idemkafka.NewTransactional("ledger-0", transform(""), kopts,
		idemkafka.WithObserver(func(e idemkafka.Event) {
			if e.Msg.Offset == 2 { // the last payment, committed
				stop()
			}
		}))
	if err != nil {
		log.Fatal(err)
	}
	if err := second.Run(runCtx); !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
	second.Close()

	// A read_committed reader of the ledger.
	rcl, err := kgo.NewClient(kgo.SeedBrokers(w.cluster.ListenAddrs()...), kgo.ConsumeTopics("ledger-entries"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		log.Fatal(err)
	}
	defer rcl.Close()
	for seen := 0; seen < 6; {
		rcl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			fmt.Println(string(r.Value))
			seen++
		})
	}
	// Output:
	// first run aborted: true
	// debit alice 30
	// credit bob 30
	// debit bob 20
	// credit carol 20
	// debit carol 10
	// credit alice 10
}
