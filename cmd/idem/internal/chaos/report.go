package chaos

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Report is the outcome of [Run]: the run's parameters and one result per
// strategy. It marshals to the JSON that `idem chaos --json` prints.
type Report struct {
	Seed        uint64           `json:"seed"`
	Backend     string           `json:"backend"`
	Keystore    string           `json:"keystore,omitempty"`
	Messages    int              `json:"messages"`
	Consumers   int              `json:"consumers"`
	DupRate     float64          `json:"dup_rate"`
	CrashRate   float64          `json:"crash_rate"`
	AckLossRate float64          `json:"ack_loss_rate"`
	Reorder     float64          `json:"reorder"`
	Strategies  []strategyResult `json:"strategies"`
}

// strategyResult is what one strategy did, by the broker's counts and by
// the ledger's.
type strategyResult struct {
	// Name is the strategy's name; Idem is true for idem's own.
	Name string `json:"name"`
	Idem bool   `json:"idem"`
	// Messages is the number of distinct messages published.
	Messages int `json:"messages"`

	// Broker side.
	Delivered         int64 `json:"delivered"`          // deliveries sent to workers
	Duplicates        int64 `json:"duplicates"`         // extra copies the producer published
	Redelivered       int64 `json:"redelivered"`        // redeliveries after a visibility timeout or a worker's death
	Crashes           int64 `json:"crashes"`            // worker processes that died of SIGKILL
	DieOrders         int64 `json:"die_orders"`         // deliveries that told their worker to die at a step
	Kills             int64 `json:"kills"`              // SIGKILLs sent by the harness at random moments
	AcksLost          int64 `json:"acks_lost"`          // acks dropped
	Nacks             int64 `json:"nacks"`              // deliveries the worker refused for now (busy, lease held, gap)
	DuplicatesSkipped int64 `json:"duplicates_skipped"` // deliveries the strategy recognised as already done
	WorkerErrors      int64 `json:"worker_errors"`      // workers that ended other than by SIGKILL

	// Ledger side: the truth.
	Applied           int64 `json:"applied"`                      // effect applications in the ledger
	Lost              int64 `json:"lost"`                         // messages never applied
	Doubled           int64 `json:"doubled"`                      // messages applied more than once
	Extra             int64 `json:"extra_applications"`           // applications beyond each message's first
	Corrupt           int64 `json:"corrupt_rows"`                 // ledger rows for no published message
	BalanceDrift      int64 `json:"balance_drift"`                // sum of balances minus what it should be
	AccountsWrong     int   `json:"accounts_wrong"`               // accounts whose balance is not the exactly-once one
	DownstreamRepeats int64 `json:"downstream_repeats,omitempty"` // keystore strategies: provider calls after a message's first

	Unfinished int     `json:"unfinished"`          // copies still unacknowledged when the run ended
	Seconds    float64 `json:"seconds"`             // from the first delivery to the last ack
	PerSecond  float64 `json:"messages_per_second"` // messages / seconds
	Database   string  `json:"database,omitempty"`  // where the tables were
	Error      string  `json:"error,omitempty"`     // why the run of this strategy failed
}

// exactlyOnce reports whether every message was applied exactly once and
// the run finished.
func (r strategyResult) exactlyOnce() bool {
	return r.Lost == 0 && r.Doubled == 0 && r.Corrupt == 0 && r.AccountsWrong == 0 && r.Unfinished == 0 && r.Error == ""
}

// verdict is the report's last column: "exactly once", or what went wrong.
func (r strategyResult) verdict() string {
	if r.Error != "" {
		return "ERROR"
	}
	var parts []string
	if r.Lost > 0 {
		parts = append(parts, fmt.Sprintf("LOST %d", r.Lost))
	}
	if r.Doubled > 0 {
		parts = append(parts, fmt.Sprintf("DOUBLED %d", r.Doubled))
	}
	if r.Corrupt > 0 {
		parts = append(parts, fmt.Sprintf("CORRUPT %d", r.Corrupt))
	}
	if r.Unfinished > 0 {
		parts = append(parts, fmt.Sprintf("UNFINISHED %d", r.Unfinished))
	}
	if len(parts) == 0 {
		if r.AccountsWrong > 0 {
			return "BALANCES WRONG"
		}
		return "exactly once"
	}
	return strings.Join(parts, ", ")
}

// Failures names the idem strategies that were not exactly once. A
// non-empty result is what makes `idem chaos` exit with status 1.
func (r *Report) Failures() []string {
	var out []string
	for _, s := range r.Strategies {
		if s.Idem && !s.exactlyOnce() {
			out = append(out, s.Name)
		}
	}
	return out
}

// WriteTable writes the report as an aligned table.
func (r *Report) WriteTable(w io.Writer) error {
	ks := ""
	if r.Keystore != "" {
		ks = ", key store " + r.Keystore
	}
	if _, err := fmt.Fprintf(w, "idem chaos: %d messages, seed %d, %s%s, %d consumer processes per strategy\n"+
		"faults: %.0f%% duplicated, %.1f%% of deliveries crash, %.1f%% of acks lost, %.0f%% reordered\n\n",
		r.Messages, r.Seed, r.Backend, ks, r.Consumers, 100*r.DupRate, 100*r.CrashRate, 100*r.AckLossRate, 100*r.Reorder); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	width := len("strategy")
	for _, s := range r.Strategies {
		width = max(width, len(s.Name))
	}
	fmt.Fprintf(tw, "%-*s\tdelivered\tdups\tcrashes\tacks lost\tnacks\tapplied\tlost\tdoubled\tmsg/s\t  verdict\n", width, "strategy")
	for _, s := range r.Strategies {
		fmt.Fprintf(tw, "%-*s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.0f\t  %s\n",
			width, s.Name, s.Delivered, s.Duplicates, s.Crashes, s.AcksLost, s.Nacks, s.Applied, s.Lost, s.Doubled, s.PerSecond, s.verdict())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if f := r.Failures(); len(f) > 0 {
		_, err := fmt.Fprintf(w, "\nFAILED: %s not exactly once\n", strings.Join(f, ", "))
		return err
	}
	return nil
}
