package main

import (
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// runWait sends batches of duplicates of one key to /slow while the first
// request runs (slowHandler): idemhttp waits (WithWait) for the first to
// complete and replays it; Fiber's middleware waits on its per-process
// lock. The time is from the batch's first request to its last answer.
func runWait(w io.Writer, c *child, o options) ([]string, error) {
	var v []string
	total := map[string]time.Duration{}
	order := []string{srvIdem, srvFiberIdem}
	k := newKeys()
	for b := range o.batches {
		if b%2 == 1 {
			slices.Reverse(order)
		}
		for _, name := range order {
			hc := client(c.addr[name], o.dups+1)
			key := k.next()
			var wg sync.WaitGroup
			var bad atomic.Int32
			start := time.Now()
			for range o.dups + 1 {
				wg.Go(func() {
					if st, _, err := post(hc, "/slow", key, reqBody); err != nil || st != 201 {
						bad.Add(1)
					}
				})
			}
			wg.Wait()
			total[name] += time.Since(start)
			if name == srvIdem && bad.Load() > 0 {
				v = append(v, fmt.Sprintf("idemhttp WithWait: %d of %d duplicates not answered 201", bad.Load(), o.dups+1))
			}
		}
	}
	fmt.Fprintf(w, "\n## Waiting duplicates: %d batches of 1 + %d requests with one key, handler %v (load %s)\n\n", o.batches, o.dups, slowHandler, loadAvg())
	fmt.Fprintf(w, "| server | all batches | a batch |\n|---|---|---|\n")
	for _, name := range []string{srvIdem, srvFiberIdem} {
		fmt.Fprintf(w, "| %s | %v | %v |\n", name, total[name].Round(time.Millisecond), (total[name] / time.Duration(o.batches)).Round(time.Millisecond))
	}
	return v, nil
}
