package idemamqp_test

import (
	"context"
	"database/sql"
	"log"
	"os/signal"
	"syscall"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/idemamqp"
	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/sqldialect"
	amqp "github.com/rabbitmq/amqp091-go"
	_ "modernc.org/sqlite"
)

// The producer publishes with a stable message-id and waits for the
// broker's confirm; the consumer credits a wallet through the inbox and
// acks after the commit. It needs a RabbitMQ broker, so it only compiles
// here.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	conn, err := amqp.Dial("amqp://guest:guest@localhost:5672/")
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()

	pub, err := idemamqp.NewPublisher(conn)
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	id, err := idem.DeriveKey("wallet.credit", "user-42", "order-7f3a")
	if err != nil {
		log.Fatal(err)
	}
	if err := pub.Publish(ctx, "", "wallet", amqp.Publishing{Body: []byte("50")}, id); err != nil {
		log.Fatal(err) // safe to publish again with the same id
	}

	db, err := sql.Open("sqlite", sqldialect.SQLiteDSN("app.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	in, err := inbox.New(db, sqldialect.SQLite, "wallet-service")
	if err != nil {
		log.Fatal(err)
	}
	c, err := idemamqp.NewConsumer(conn, "wallet", in, func(ctx context.Context, tx *sql.Tx, d amqp.Delivery) error {
		_, err := tx.ExecContext(ctx, "UPDATE wallets SET balance = balance + CAST(? AS INTEGER) WHERE id = 42", string(d.Body))
		return err
	}, idemamqp.WithDeadLetter("wallet.dlx", ""), idemamqp.WithMaxAttempts(5))
	if err != nil {
		log.Fatal(err)
	}
	// Run returns on SIGINT/SIGTERM, or with ErrClosed when the connection
	// drops: reconnect and call Run again.
	if err := c.Run(ctx); err != nil {
		log.Print(err)
	}
}
