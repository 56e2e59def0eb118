// Command idem runs idem's demonstration and hands its other commands to
// idemd, the binary with the gateway and the tools.
//
//	idem demo     run the inbox's worked examples on an embedded SQLite database
//	idem serve    an Idempotency-Key reverse proxy in front of any HTTP API
//	idem plan     size the dedup store from a message rate and a duplicate horizon
//	idem chaos    kill consumers, drop acks, duplicate and reorder messages, and count what each strategy loses or doubles
//	idem keys     list, inspect, release (fenced) and forget keys in a key store
//	idem inbox    show or forget one key of an inbox table (to re-run one message on purpose)
//
// idem is small on purpose: it links only the inbox and SQLite, so that a
// newcomer's first `go run ./cmd/idem demo` compiles in about half a minute
// on two cores instead of two (the gateway links the PostgreSQL, MySQL,
// Redis, NATS and DynamoDB clients, Prometheus and OpenTelemetry). Every
// command but demo and version runs in idemd
// (github.com/idem-go/idem/cmd/idem/idemd) with the same arguments, in the
// same process (exec), so signals, exit codes and SIGHUP reloads behave as if
// idem were one binary. Install both with
//
//	go install github.com/idem-go/idem/cmd/idem/...@VERSION
//
// idem finds idemd, in this order: the file named by $IDEM_IDEMD; idemd in
// the directory of the idem executable (where go install puts both); when
// idem was built from a source tree (go run ./cmd/idem), idemd built from the
// same tree into the user cache directory; idemd on $PATH, if its version is
// idem's.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs the command in args and returns the process's exit code.
func run(args []string, stdout, stderr io.Writer) int {
	switch command(args) {
	case "demo":
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		if err := runDemo(ctx, args[1:], stdout, stderr); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			fmt.Fprintln(stderr, "idem:", err)
			return 1
		}
		return 0
	case "version":
		fmt.Fprintln(stdout, "idem", version())
		return 0
	}
	path, err := findIdemd(stderr)
	if err != nil {
		if isHelp(args) {
			// Help needs no idemd: the command list is known here.
			usage(stdout)
			fmt.Fprintf(stdout, "\n%v\n", err)
			return 0
		}
		fmt.Fprintln(stderr, "idem:", err)
		return 1
	}
	if err := execIdemd(path, args); err != nil {
		fmt.Fprintln(stderr, "idem:", err)
		return 1
	}
	return 0
}

// command returns the first argument, the command's name ("" when there is
// none or it is a flag).
func command(args []string) string {
	if len(args) == 0 || len(args[0]) > 0 && args[0][0] == '-' {
		return ""
	}
	return args[0]
}

func isHelp(args []string) bool {
	if len(args) == 0 {
		return true
	}
	switch args[0] {
	case "help", "-h", "--help", "-help":
		return true
	}
	return false
}
