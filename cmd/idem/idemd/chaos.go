package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/idem-go/idem/cmd/idem/internal/chaos"
	"github.com/idem-go/idem/keystore"
	"github.com/spf13/cobra"
)

type chaosFlags struct {
	messages, consumers, partitions int
	dupRate, crashRate, ackLoss     float64
	reorder                         float64
	backend, dsn, keystore          string
	strategies                      string
	seed                            uint64
	asJSON, keep, verbose           bool
	timeout, visibility, lease      time.Duration
}

func newChaos() *cobra.Command {
	var f chaosFlags
	cmd := &cobra.Command{
		Use:   "chaos",
		Short: "Prove effectively-once under crashes, lost acks, duplicates and reordering",
		Long: `chaos runs every consumer strategy against the same faults and checks the
result against the exactly-once truth. An in-process broker delivers deposit
messages at least once to consumers that are separate processes; it kills them
with SIGKILL at chosen steps and at random moments, drops acks, publishes
duplicates and reorders messages, and restarts the consumers. Then it counts,
in each strategy's ledger, the messages that were lost and the ones applied
more than once.

idem's strategies (idem-*) must lose nothing and double nothing; the naive
ones show what they lose. The exit status is 1 if an idem strategy did not
apply every message exactly once.

Strategies:
` + strategyHelp(),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runChaos(cmd, f) },
	}
	fl := cmd.Flags()
	fl.IntVar(&f.messages, "messages", chaos.DefaultMessages, "distinct messages per strategy")
	fl.Float64Var(&f.dupRate, "dup-rate", chaos.DefaultDupRate, "share of messages published twice")
	fl.Float64Var(&f.crashRate, "crash-rate", chaos.DefaultCrashRate, "probability that a delivery's consumer is killed")
	fl.Float64Var(&f.ackLoss, "ack-loss", chaos.DefaultAckLoss, "probability that an ack is dropped")
	fl.Float64Var(&f.reorder, "reorder", chaos.DefaultReorder, "share of messages published up to 100 positions late")
	fl.StringVar(&f.backend, "backend", chaos.BackendSQLite, "database: sqlite or postgres")
	fl.StringVar(&f.dsn, "dsn", "", "postgres://… URL (postgres); a directory for the database files (sqlite, default: a temp dir)")
	fl.StringVar(&f.keystore, "keystore", "", "key store of the keystore strategies: redis://…, postgres://…, sqlite:PATH (default: the ledger's database)")
	fl.StringVar(&f.strategies, "strategies", "", "comma-separated strategies to run (default: all)")
	fl.IntVar(&f.consumers, "consumers", chaos.DefaultConsumers, "consumer processes per strategy")
	fl.IntVar(&f.partitions, "partitions", chaos.DefaultPartitions, "producers (sequence partitions) of idem-sequence")
	fl.Uint64Var(&f.seed, "seed", 0, "seed of the fault schedule (0: pick one and print it)")
	fl.BoolVar(&f.asJSON, "json", false, "print the report as JSON")
	durationVar(fl, &f.timeout, "timeout", 30*time.Minute, "give up after this long")
	durationVar(fl, &f.visibility, "visibility", chaos.DefaultVisibility, "redeliver a delivery unacknowledged for this long")
	durationVar(fl, &f.lease, "lease", chaos.DefaultLease, "keystore lease")
	fl.BoolVar(&f.keep, "keep", false, "keep the databases for inspection")
	fl.BoolVar(&f.verbose, "verbose", false, "log worker restarts and errors to stderr")
	return cmd
}

func strategyHelp() string {
	var b strings.Builder
	for _, s := range chaos.Strategies() {
		fmt.Fprintf(&b, "  %-18s %s\n", s.Name, s.How)
	}
	return b.String()
}

func runChaos(cmd *cobra.Command, f chaosFlags) error {
	ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
	defer cancel()
	out := cmd.OutOrStdout()
	if f.seed == 0 {
		f.seed = uint64(time.Now().UnixNano()) | 1
	}
	level := slog.LevelError
	if f.verbose {
		level = slog.LevelDebug
	}
	opts := []chaos.Option{
		chaos.WithMessages(f.messages), chaos.WithDupRate(f.dupRate), chaos.WithCrashRate(f.crashRate),
		chaos.WithAckLossRate(f.ackLoss), chaos.WithReorder(f.reorder), chaos.WithBackend(f.backend, f.dsn),
		chaos.WithConsumers(f.consumers), chaos.WithPartitions(f.partitions), chaos.WithSeed(f.seed),
		chaos.WithVisibilityTimeout(f.visibility), chaos.WithLease(f.lease), chaos.WithKeep(f.keep),
		chaos.WithLogger(slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))),
	}
	if f.keystore != "" {
		if spec, err := parseStoreSpec(f.keystore); err != nil || spec.kind == "memory" {
			return fmt.Errorf("chaos: --keystore %q: want redis://…, postgres://… or sqlite:PATH (shared by the worker processes)", redactURL(f.keystore))
		}
		opts = append(opts, chaos.WithKeystore(f.keystore))
	}
	if f.strategies != "" {
		opts = append(opts, chaos.WithStrategies(strings.Split(f.strategies, ",")...))
	}
	bar := newProgressBar(out)
	if bar != nil && !f.asJSON {
		opts = append(opts, chaos.WithProgress(bar.update))
	}
	rep, err := chaos.Run(ctx, opts...)
	if bar != nil {
		bar.clear()
	}
	if rep != nil {
		if f.asJSON {
			enc := json.NewEncoder(out)
			enc.SetIndent("", "  ")
			if jerr := enc.Encode(rep); jerr != nil {
				return jerr
			}
		} else if terr := rep.WriteTable(out); terr != nil {
			return terr
		}
	}
	if err != nil {
		return err
	}
	if failed := rep.Failures(); len(failed) > 0 {
		return fmt.Errorf("chaos: not exactly once: %s (seed %d)", strings.Join(failed, ", "), f.seed)
	}
	return nil
}

// newChaosWorker is the hidden command that chaos starts as its consumer
// processes; it speaks the harness's protocol on stdin and stdout.
func newChaosWorker() *cobra.Command {
	return &cobra.Command{
		Use:    "chaos-worker",
		Short:  "A consumer process of idem chaos (started by it; not for direct use)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return chaos.ServeWorker(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout(), chaos.WithKeystoreOpener(openChaosKeystore))
		},
	}
}

// openChaosKeystore opens a --keystore URL in a worker with the same code
// as idem serve's --store.
func openChaosKeystore(ctx context.Context, url string) (keystore.Store, func() error, error) {
	spec, err := parseStoreSpec(url)
	if err != nil {
		return nil, nil, err
	}
	if spec.kind == "memory" {
		return nil, nil, errors.New("an in-memory key store is not shared between processes")
	}
	s, err := openStore(ctx, spec, 1<<10)
	if err != nil {
		return nil, nil, err
	}
	return s.Store, s.close, nil
}

// progressBar draws one line on a terminal and redraws it in place.
type progressBar struct {
	w    io.Writer
	last int
}

// newProgressBar returns a bar when w is a terminal, else nil.
func newProgressBar(w io.Writer) *progressBar {
	f, ok := w.(*os.File)
	if !ok {
		return nil
	}
	st, err := f.Stat()
	if err != nil || st.Mode()&os.ModeCharDevice == 0 {
		return nil
	}
	return &progressBar{w: w}
}

func (b *progressBar) update(p chaos.Progress) {
	const width = 30
	frac := 0.0
	if p.Total > 0 {
		frac = float64(p.Done) / float64(p.Total)
	}
	n := int(frac * width)
	line := fmt.Sprintf("\r[%d/%d] %-18s [%s%s] %3.0f%%  %d delivered, %d crashes, %s",
		p.Index+1, p.Strategies, p.Strategy, strings.Repeat("=", n), strings.Repeat(" ", width-n), 100*frac,
		p.Delivered, p.Crashes, p.Elapsed.Round(100*time.Millisecond))
	pad := max(0, b.last-len(line))
	b.last = len(line)
	fmt.Fprint(b.w, line+strings.Repeat(" ", pad))
}

func (b *progressBar) clear() {
	if b.last > 0 {
		fmt.Fprint(b.w, "\r"+strings.Repeat(" ", b.last)+"\r")
		b.last = 0
	}
}
