// Package idemkafka turns Kafka's at-least-once consumer-group delivery
// (franz-go) into effectively-once effects in a database.
//
// The package has four consumers, each a type of its own with one option
// list ([Option], validated once by its constructor):
//
//   - [Consumer] ([NewConsumer]): each record's key and effect commit in one
//     database transaction through an [inbox.Inbox];
//   - [OffsetConsumer] ([NewOffsetConsumer]): the partition's next offset
//     commits with the effects instead of a key per record;
//   - [KeystoreConsumer] ([NewKeystoreConsumer]): effects outside the
//     database, through keystore.Do;
//   - [TransactConsumer] ([NewTransactional]): effects that are records
//     produced to Kafka, in one Kafka transaction with the offsets.
//
// They share one poll loop, one dead-letter format and one vocabulary with
// idem's other broker adapters: [WithKey], [WithFingerprint],
// [WithSetHandler], [WithBatchSize], [WithMaxAttempts], [WithBackoff],
// [WithDeadLetter], [WithObserver] (an [Event] per record: idem.Applied,
// idem.Duplicate, idem.Retried, idem.DeadLettered with an idem.Reason),
// [WithLogger] and [WithTracer] (a span per batch and per record, linked
// to the producer's traceparent header). The rules that decide a record's fate (key and fingerprint
// checks, applied or duplicate, retry or dead-letter) are the same in every
// adapter; the package adds Kafka's transport: polling, offset marks and
// commits, the dead-letter topic, headers and transactions.
//
// A [Consumer] polls a consumer group and, for each partition of each poll,
// applies the records' effects through an [inbox.Inbox] in one transaction
// (inbox.ProcessBatch: one commit per batch), retries and dead-letters the
// records whose handler failed, and only then marks the partition's offset
// for commit (franz-go AutoCommitMarks: committed every few seconds, when
// partitions are revoked, and on Close). Rebalances are blocked while a poll
// is processed (kgo.BlockRebalanceOnPoll), so a revoke never interrupts a
// batch; the revoke commits the marks, and the next owner starts after them.
//
//	in, _ := inbox.New(db, sqldialect.Postgres, "billing") // name the inbox after the group
//	c, err := idemkafka.NewConsumer(in, func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error {
//		_, err := tx.ExecContext(ctx, "UPDATE wallets SET balance = balance + 50 WHERE user_id = 42")
//		return err
//	}, []kgo.Opt{kgo.SeedBrokers(addr), kgo.ConsumerGroup("billing"), kgo.ConsumeTopics("payments")},
//		idemkafka.WithDeadLetter("payments.dlq"))
//	if err != nil { ... }
//	defer c.Close()
//	err = c.Run(ctx)
//
// # Set handlers
//
// [WithSetHandler] gives a [SetHandler] that applies a whole batch at once:
// the batch's keys are recorded with one multi-row insert and the set
// handler is called once, in the same transaction, with only the records
// whose keys were new (inbox.ProcessBatchSet), so a batch costs a fixed
// number of statements (one multi-row INSERT, one UPDATE of aggregated
// amounts) instead of one per record. The Handler given to NewConsumer is
// then the fallback: if the set handler fails, the transaction rolls back
// and the batch is run again record by record with the Handler, each in a
// savepoint, so a poison record is isolated, retried and dead-lettered as
// below while the rest commit. The Handler may be nil; a failing set handler
// then fails the whole batch: it is retried as a whole, up to
// [WithMaxAttempts] runs with the [WithBackoff] delays, and Run then returns
// an error without marking anything.
//
//	c, err := idemkafka.NewConsumer(in, creditOne, kopts,
//		idemkafka.WithSetHandler(func(ctx context.Context, tx *sql.Tx, recs []*kgo.Record) error {
//			return creditAll(ctx, tx, recs) // aggregate per wallet, one UPDATE
//		}))
//
// Time-ordered keys (UUIDv7 in the idem-id header) keep the inbox's index
// growing at its right edge; random keys (UUIDv4) scatter its inserts, which
// costs the most on SQLite (see docs/adapters-kafka.md for measurements).
//
// # Keys
//
// By default a record's key is its idem-id header ([HeaderID]), which
// [Producer] stamps: every copy of one logical message carries the same id, so
// the copies a producer sends after a timeout or a crash are applied once.
// WithKey([HeaderKey](name)) names another header, [WithKey] with your own
// [KeyFunc] derives the key from the record (a business id, see
// idem.DeriveKey), and WithKey([OffsetKey]) uses topic/partition/offset. Offset keys are compact and always present, but they
// name a position in one log, not a message: a message produced twice has two
// offsets and is applied twice, and after the topic is recreated or its data
// repartitioned into another topic, offsets name other messages, which are then
// dropped as duplicates. Use them only when producers never resend and topics
// are never rebuilt.
//
// A record without a key is dead-lettered with reason idem.ReasonMissingKey
// (idem.ReasonInvalidKey for a key that fails idem.ValidateKey; the default
// [DeadLetterMissing]), or stops Run with an error wrapping
// idem.ErrMissingKey ([StopOnMissing]); it is never applied without a key
// and never skipped silently. With [WithFingerprint], a fingerprint longer
// than idem.MaxFingerprintLen is dead-lettered with
// idem.ReasonInvalidFingerprint, and a key that arrives again with another
// fingerprint with idem.ReasonFingerprintMismatch.
//
// # Failures
//
// A handler error rolls back that record alone (the rest of the batch
// commits); the record is run again alone, with jittered exponential backoff
// ([WithBackoff]), up to [WithMaxAttempts] runs in all, then produced to the
// dead-letter topic ([WithDeadLetter]) with headers naming the error, the
// reason (idem.ReasonMaxAttempts, idem.ReasonPermanent, …), the
// original topic, partition and offset, the attempts and the group
// ([HeaderDLQError] and the others). An error marked with idem.Permanent skips
// the retries. Retried records may be applied after later records of their
// partition. If there is no dead-letter topic, or producing to it fails, Run
// returns an error wrapping [ErrDeadLetter] and the offset is not marked: a
// record is never acknowledged without being applied or dead-lettered. A
// database that cannot answer also stops Run (fail closed).
//
// Dead-lettering is at least once: if the process dies after the dead-letter
// produce and before the offset commit, the record is dead-lettered again
// after the restart. Deduplicate the dead-letter topic on the
// idem-dlq-topic/partition/offset headers if that matters.
//
// # What happens if the process dies
//
//   - Before the batch's transaction commits: neither keys nor effects are
//     recorded; the records are consumed again from the committed offset and
//     applied.
//   - During COMMIT: Run returns the error; the records are consumed again,
//     and the inbox finds the keys if the commit landed.
//   - After the commit, before the offset commit: the records are consumed
//     again by this or another member; the inbox reports them as duplicates
//     and the effects are not repeated. The offsets are then committed.
//   - After the offset commit: nothing is consumed again.
//
// # Offsets in the database
//
// An [OffsetConsumer] needs no key at all: it writes each partition's next
// offset into a table (group_id, topic, partition_id, next_offset; "group"
// and "partition" are reserved words in SQL) in the same transaction as the
// effects, and seeks to it when a partition is assigned
// (kgo.AdjustFetchOffsetsFn). If the process dies after the database commit
// and before any Kafka commit, the new owner seeks past the applied records:
// exactly-once from Kafka into the database, with one row per partition
// instead of one per record. The offset update is conditional, so a member
// that lost its partitions without noticing cannot commit a batch over the
// new owner's work. It requires every effect of the handler to be in the same
// database; effects elsewhere need keys (the inbox, or a keystore.Store
// inside the handler).
//
// # Effects outside the database
//
// A [KeystoreConsumer] runs each record through keystore.Do instead: the key
// is reserved in progress with a lease, the handler runs (an email, a payment
// API call), and the key is completed only after it succeeded, or released
// when it failed so that the retry runs it again. If the process dies after
// the effect and before completion, the re-consumed record runs the handler
// again once the lease expires: send the key downstream so that the repeat is
// absorbed there.
//
// # Kafka transactions
//
// [NewTransactional] is for consumers whose only effects are records
// produced to Kafka: a [TransactConsumer] runs each poll as one Kafka
// transaction (kgo.GroupTransactSession), so the outputs and the consumed
// offsets commit together and read_committed readers see each output once,
// through crashes, rebalances and fenced zombie instances. It covers
// nothing outside Kafka: a handler that also writes to a database uses a
// Consumer with an outbox, or produces with [OutputID]s that a downstream
// Consumer deduplicates (see docs/adapters-kafka.md, "Which exactly-once do
// I need").
//
// # Producing
//
// franz-go's producer is idempotent by default: the broker drops a batch the
// client resends after a lost acknowledgement. That covers one produce call,
// not an application that produces the same message again; [Producer] stamps a
// stable [HeaderID] for that, and [SetSequence] can stamp idem's
// (producer, epoch, sequence) headers for consumers that keep high-water
// marks (package sequence) instead of keys.
//
// [Producer.OutboxPublisher] is the Kafka publisher of a transactional outbox
// relay (package outbox): each message becomes a record keyed by its
// aggregate key, with [HeaderID] = the message id and [HeaderOutboxSeq] = its
// outbox sequence, and Publish returns only when every record is
// acknowledged. A relay that dies after publishing and before marking the
// batch sent publishes it again with the same ids; a [Consumer] (keyed by
// [HeaderID], the default) applies each message once.
//
// # Goroutines
//
// Every consumer owns its franz-go client. Run runs in the caller's goroutine;
// Close stops it, commits the marked offsets while leaving the group, and
// closes the client and every goroutine it started.
package idemkafka
