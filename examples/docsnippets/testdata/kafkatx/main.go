// Mirror of the block in docs/adapters-kafka.md, "Kafka transactions".
//
//docsnippets:build-only needs a Kafka broker
package main

import (
	"context"
	"log"
	"os"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idem-go/idem/adapters/idemkafka"
)

func transact(ctx context.Context, addr string) error {
	c, err := idemkafka.NewTransactional("ledger-0", // stable per instance: a StatefulSet pod name
		func(ctx context.Context, r *kgo.Record) ([]*kgo.Record, error) {
			return []*kgo.Record{{Topic: "ledger-entries", Key: r.Key, Value: toEntry(r.Value)}}, nil
		},
		[]kgo.Opt{kgo.SeedBrokers(addr), kgo.ConsumerGroup("ledger"), kgo.ConsumeTopics("payments")},
		idemkafka.WithDeadLetter("payments.dlq"))
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Run(ctx)
}

func toEntry(payment []byte) []byte { return payment }

func main() {
	if err := transact(context.Background(), os.Getenv("KAFKA_ADDR")); err != nil {
		log.Fatal(err)
	}
}
