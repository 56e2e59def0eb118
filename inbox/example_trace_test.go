package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/sqldialect"
)

// printTracer is the smallest idem.Tracer: it prints each span's name and
// outcome when it ends. Package github.com/idem-go/idem/idemotel is the
// OpenTelemetry one.
type printTracer struct{}

func (printTracer) Start(ctx context.Context, op string) (context.Context, idem.Span) {
	return ctx, printSpan(op)
}

type printSpan string

func (printSpan) Key(string)        {}
func (printSpan) Attr(string, any)  {}
func (printSpan) Link(idem.Carrier) {}
func (s printSpan) End(outcome string, err error) {
	fmt.Println(string(s), outcome)
}

// A delivery and its redelivery, traced.
func ExampleWithTracer() {
	db, cleanup := openExampleDB()
	defer cleanup()
	ctx := context.Background()
	in, err := inbox.New(db, sqldialect.SQLite, "account-service", inbox.WithTracer(printTracer{}))
	if err != nil {
		log.Fatal(err)
	}
	if err := in.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	credit := func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = balance + 10 WHERE id = 42")
		return err
	}
	for range 2 {
		if _, err := in.Process(ctx, "evt-1", credit); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// idem.inbox.process applied
	// idem.inbox.process duplicate
}
