package main

import (
	"fmt"
	"os"

	"github.com/idem-go/idem/internal/demo"
	"github.com/spf13/cobra"
)

func newDemo() *cobra.Command {
	var keep bool
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the inbox's worked examples on an embedded SQLite database (no server needed)",
		Long: `demo runs three worked examples through the transactional
inbox on a SQLite file in a temporary directory, and prints what happened:
the Account's five deliveries, the wallet credit's naive and gated versions,
and 32 concurrent deliveries of one key.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := os.MkdirTemp("", "idem-demo-")
			if err != nil {
				return err
			}
			if !keep {
				defer os.RemoveAll(dir)
			}
			r, err := demo.Run(cmd.Context(), dir, cmd.OutOrStdout())
			if err != nil {
				return err
			}
			if r.RaceApplied != 1 || r.GatedBalance != 50 {
				return fmt.Errorf("demo: effectively-once violated: %+v", r)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the SQLite file for inspection")
	return cmd
}
