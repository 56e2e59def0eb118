// Command idemd runs idem's commands: the idem launcher (cmd/idem) runs demo
// itself and hands every other command here, in the same process, so that
// `idem serve` and `idemd serve` are the same program.
//
//	idemd demo     run the inbox's worked examples on an embedded SQLite database
//	idemd serve    an Idempotency-Key reverse proxy in front of any HTTP API
//	idemd plan     size the dedup store from a message rate and a duplicate horizon
//	idemd chaos    kill consumers, drop acks, duplicate and reorder messages, and count what each strategy loses or doubles
//	idemd keys     list, inspect, release (fenced) and forget keys in a key store
//	idemd inbox    show or forget one key of an inbox table (to re-run one message on purpose)
//	idemd version  print the version
//
// It links every store's client, Prometheus and OpenTelemetry, which is why
// it is a binary of its own: see cmd/idem's doc.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
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
	root.AddCommand(newDemo(), newServe(), newPlan(), newChaos(), newChaosWorker(), newKeys(), newInbox(), newVersion())
	return root
}

func newVersion() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := "(devel)"
			if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
				v = bi.Main.Version
			}
			fmt.Fprintln(cmd.OutOrStdout(), "idem", v)
			return nil
		},
	}
}
