// Command idem runs idem's demonstrations and tools.
//
//	idem demo     run the inbox's worked examples on an embedded SQLite database
//	idem serve    an Idempotency-Key reverse proxy in front of any HTTP API
//	idem plan     size the dedup store from a message rate and a duplicate horizon
//	idem chaos    kill consumers, drop acks, duplicate and reorder messages, and count what each strategy loses or doubles
//	idem keys     list, inspect, release (fenced) and forget keys in a key store
//	idem inbox    show or forget one key of an inbox table (to re-run one message on purpose)
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRoot(os.Stdout, os.Stderr).ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "idem:", err)
		os.Exit(1)
	}
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "idem",
		Short:         "Effectively-once results over at-least-once delivery",
		Long:          "idem applies the effect of a message or request once per key when it is delivered one or more times:\nin the inbox, key and effect commit in one transaction; with a key store outside the database, a crash\nbetween the effect and its completion can repeat it once (docs/guarantees.md).\nSee https://github.com/idem-go/idem for the library.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(newDemo(), newServe(), newPlan(), newChaos(), newChaosWorker(), newKeys(), newInbox())
	return root
}
