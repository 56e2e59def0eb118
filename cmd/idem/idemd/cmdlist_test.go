package main

import (
	"io"
	"slices"
	"testing"

	"github.com/idem-go/idem/cmd/idem/internal/cmdlist"
)

// TestCommandList keeps the idem launcher's help, which lists the commands
// without idemd, the same as idemd's command tree.
func TestCommandList(t *testing.T) {
	var have, want []string
	for _, c := range newRoot(io.Discard, io.Discard).Commands() {
		if !c.Hidden && c.Name() != "help" && c.Name() != "completion" {
			have = append(have, c.Name())
		}
	}
	for _, c := range cmdlist.Commands {
		want = append(want, c.Name)
	}
	slices.Sort(have)
	slices.Sort(want)
	if !slices.Equal(have, want) {
		t.Fatalf("idemd's commands %v, cmdlist.Commands %v: update cmd/idem/internal/cmdlist", have, want)
	}
}
