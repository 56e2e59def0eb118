package main

import (
	"github.com/idem-go/idem/internal/app/demo"
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
			return demo.RunTemp(cmd.Context(), keep, cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the SQLite file for inspection")
	return cmd
}
