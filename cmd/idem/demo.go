package main

import (
	"context"
	"flag"
	"io"

	"github.com/idem-go/idem/internal/app/demo"
)

// runDemo is `idem demo`, the same command idemd has, run here so that it
// needs nothing but the inbox and SQLite.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("idem demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	keep := fs.Bool("keep", false, "keep the SQLite file for inspection")
	fs.Usage = func() {
		io.WriteString(stderr, "Run the inbox's worked examples on an embedded SQLite database (no server needed)\n\nUsage:\n  idem demo [--keep]\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return errArgs(fs.Args())
	}
	return demo.RunTemp(ctx, *keep, stdout)
}
