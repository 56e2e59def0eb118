package chaos

import (
	"context"
	"fmt"
)

// A small run of two strategies on SQLite. In a program, the default worker
// command runs the program itself with the argument "chaos-worker", whose
// handler calls ServeWorker(ctx, os.Stdin, os.Stdout); this example
// starts its test binary instead. Which messages are duplicated is fixed by
// the seed, and naive-cte applies every duplicate twice, so the output does
// not depend on timing.
func Example() {
	rep, err := Run(context.Background(),
		WithMessages(150),
		WithSeed(7),
		WithConsumers(2),
		WithStrategies("naive-cte", "idem-inbox"),
		withWorkerCommand(workerCommand), // this test binary as a worker
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range rep.Strategies {
		fmt.Printf("%s: lost=%d doubled>0=%v exactly once=%v\n", s.Name, s.Lost, s.Doubled > 0, s.exactlyOnce())
	}
	// Output:
	// naive-cte: lost=0 doubled>0=true exactly once=false
	// idem-inbox: lost=0 doubled>0=false exactly once=true
}
