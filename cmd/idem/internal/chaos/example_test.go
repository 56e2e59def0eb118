package chaos_test

import (
	"context"
	"fmt"

	"github.com/idem-go/idem/cmd/idem/internal/chaos"
)

// A small run of two strategies on SQLite. In a program, the default worker
// command runs the program itself with the argument "chaos-worker", whose
// handler calls chaos.ServeWorker(ctx, os.Stdin, os.Stdout); this example
// starts its test binary instead. Which messages are duplicated is fixed by
// the seed, and naive-cte applies every duplicate twice, so the output does
// not depend on timing.
func Example() {
	rep, err := chaos.Run(context.Background(),
		chaos.WithMessages(150),
		chaos.WithSeed(7),
		chaos.WithConsumers(2),
		chaos.WithStrategies("naive-cte", "idem-inbox"),
		chaos.WithWorkerCommand(workerCommand), // this test binary as a worker
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range rep.Strategies {
		fmt.Printf("%s: lost=%d doubled>0=%v exactly once=%v\n", s.Name, s.Lost, s.Doubled > 0, s.ExactlyOnce())
	}
	// Output:
	// naive-cte: lost=0 doubled>0=true exactly once=false
	// idem-inbox: lost=0 doubled>0=false exactly once=true
}
