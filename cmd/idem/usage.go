package main

import (
	"fmt"
	"io"

	"github.com/idem-go/idem/cmd/idem/internal/cmdlist"
)

func usage(w io.Writer) {
	fmt.Fprintln(w, "idem applies the effect of a message or request once per key when it is delivered one or more times.")
	fmt.Fprintln(w, "\nUsage:\n  idem <command> [flags]\n\nCommands:")
	for _, c := range cmdlist.Commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.Name, c.Short)
	}
	fmt.Fprintln(w, "\nEvery command but demo and version runs in idemd; `idem <command> --help` shows its flags.")
}
