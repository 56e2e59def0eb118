package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"time"
)

// options of one run.
type options struct {
	rounds   int           // alternating rounds of each HTTP comparison
	dur      time.Duration // load per server per round
	conc     int           // concurrent HTTP clients
	batches  int           // WithWait batches
	dups     int           // duplicates per batch
	events   int           // Watermill events (each published twice)
	wmRounds int           // Watermill rounds
	keys     int           // keys of the two-instance scenario
	only     string        // "", or a comma-separated list of http,new,replays,wait,watermill,correct
}

func fullOptions() options {
	return options{rounds: 5, dur: 3 * time.Second, conc: 16, batches: 10, dups: 32, events: 20000, wmRounds: 3, keys: 200}
}

// shortOptions run in seconds: the correctness assertions hold in them,
// and the numbers mean nothing.
func shortOptions() options {
	return options{rounds: 1, dur: 200 * time.Millisecond, conc: 4, batches: 2, dups: 8, events: 2000, wmRounds: 1, keys: 40}
}

func main() {
	if os.Getenv(serveEnv) != "" {
		serveChild()
		os.Exit(0)
	}
	o := fullOptions()
	short := flag.Bool("short", false, "seconds, not minutes: check the correctness assertions only")
	flag.IntVar(&o.rounds, "rounds", o.rounds, "alternating rounds of each HTTP comparison")
	flag.DurationVar(&o.dur, "dur", o.dur, "load per server per round")
	flag.IntVar(&o.conc, "conc", o.conc, "concurrent HTTP clients")
	flag.IntVar(&o.events, "events", o.events, "Watermill events, each published twice")
	flag.StringVar(&o.only, "only", "", "run only these parts: http (new and replays), new (HTTP new keys), replays (HTTP replays), wait, watermill, correct")
	readTimeout := flag.Duration("read-timeout", 0, "the net/http servers' ReadTimeout, the bare one's and idemhttp's (0: none, as http.Server's default)")
	profile := flag.String("cpuprofile", "", "write this process's CPU profile (the Watermill runs, the clients) to `file`")
	flag.Parse()
	if *readTimeout != 0 {
		// The server process, started later, inherits it.
		_ = os.Setenv(serveEnv+"_READ_TIMEOUT", readTimeout.String())
	}
	if *profile != "" {
		if err := startCPUProfile(*profile); err != nil {
			fmt.Fprintln(os.Stderr, "peerbench:", err)
			os.Exit(2)
		}
		defer pprof.StopCPUProfile()
	}
	if *short {
		s := shortOptions()
		s.only = o.only
		o = s
	}
	if err := run(os.Stdout, o); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// errViolated is returned when idem's side lost, doubled or left stuck
// anything: speed is never bought with correctness.
var errViolated = errors.New("peerbench: a correctness assertion failed on idem's side")

func (o options) wants(part string) bool {
	return o.only == "" || slices.Contains(strings.Split(o.only, ","), part)
}

func run(w io.Writer, o options) error {
	fmt.Fprintf(w, "peerbench %s, load average %s\n", time.Now().UTC().Format(time.RFC3339), loadAvg())
	var violations []string
	if o.wants("correct") {
		v, err := runCorrectness(w, o)
		if err != nil {
			return err
		}
		violations = append(violations, v...)
	}
	if o.wants("watermill") {
		v, err := runWatermillBench(w, o)
		if err != nil {
			return err
		}
		violations = append(violations, v...)
	}
	httpParts := o.wants("http") || o.wants("new") || o.wants("replays")
	if httpParts || o.wants("wait") {
		c, err := startChild()
		if err != nil {
			return err
		}
		defer c.Close()
		if httpParts {
			v, err := runHTTP(w, c, o)
			if err != nil {
				return err
			}
			violations = append(violations, v...)
		}
		if o.wants("wait") {
			v, err := runWait(w, c, o)
			if err != nil {
				return err
			}
			violations = append(violations, v...)
		}
	}
	if len(violations) > 0 {
		for _, v := range violations {
			fmt.Fprintln(w, "VIOLATED:", v)
		}
		return errViolated
	}
	fmt.Fprintln(w, "idem's side: 0 lost, 0 doubled, 0 stuck in every scenario")
	return nil
}

func runCorrectness(w io.Writer, o options) ([]string, error) {
	res, err := correctness(o.keys)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "\n## HTTP correctness (idemhttp vs Fiber v3.1.0 idempotency)\n\n| scenario | side | wrong | of | what |\n|---|---|---|---|---|\n")
	var v []string
	for _, r := range res {
		fmt.Fprintf(w, "| %s | %s | %d | %d | %s |\n", r.Scenario, r.Side, r.Count, r.Of, r.What)
		if r.Side == "idemhttp" && r.Count != 0 {
			v = append(v, fmt.Sprintf("idemhttp: %s: %d of %d %s", r.Scenario, r.Count, r.Of, r.What))
		}
	}
	return v, nil
}

// stats is the median and the spread of a series.
type stats struct{ med, lo, hi float64 }

func summarize(xs []float64) stats {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return stats{}
	}
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return stats{med: med, lo: s[0], hi: s[len(s)-1]}
}

func (s stats) String() string {
	return fmt.Sprintf("%.2f (%.2f–%.2f)", s.med, s.lo, s.hi)
}

func (s stats) f1() string { return fmt.Sprintf("%.1f (%.1f–%.1f)", s.med, s.lo, s.hi) }
func (s stats) f0() string { return fmt.Sprintf("%.0f (%.0f–%.0f)", s.med, s.lo, s.hi) }

func runWatermillBench(w io.Writer, o options) ([]string, error) {
	var v []string
	fmt.Fprintf(w, "\n## Watermill v1.5.1: %d events published twice (load %s)\n\n", o.events, loadAvg())
	// Correctness: a tenth of the events fail their first attempt.
	fmt.Fprintf(w, "| side | first attempt of 1 in 10 fails | lost | doubled |\n|---|---|---|---|\n")
	for _, side := range []string{wmIdem, wmDedup, wmAdler} {
		fail := 10
		if side == wmAdler {
			fail = 0 // its losses are collisions alone
		}
		r, err := runWatermill(side, o.events, fail)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(w, "| %s | %v | %d | %d |\n", side, fail > 0, r.lost, r.doubled)
		if side == wmIdem && (r.lost != 0 || r.doubled != 0) {
			v = append(v, fmt.Sprintf("idemwatermill: %d lost, %d doubled of %d events", r.lost, r.doubled, o.events))
		}
	}
	// Speed: no failures, alternating order.
	rate := map[string][]float64{}
	cpu := map[string][]float64{}
	var ratio, cpuRatio []float64
	for round := range o.wmRounds {
		order := []string{wmIdem, wmDedup}
		if round%2 == 1 {
			slices.Reverse(order)
		}
		got := map[string]wmResult{}
		for _, side := range order {
			r, err := runWatermill(side, o.events, 0)
			if err != nil {
				return nil, err
			}
			if side == wmIdem && (r.lost != 0 || r.doubled != 0) {
				v = append(v, fmt.Sprintf("idemwatermill (speed run): %d lost, %d doubled", r.lost, r.doubled))
			}
			got[side] = r
			rate[side] = append(rate[side], r.rate())
			cpu[side] = append(cpu[side], r.cpuPer())
		}
		ratio = append(ratio, got[wmIdem].rate()/got[wmDedup].rate())
		cpuRatio = append(cpuRatio, got[wmIdem].cpuPer()/got[wmDedup].cpuPer())
	}
	fmt.Fprintf(w, "\n| side | publishes/s | CPU µs a publish |\n|---|---|---|\n")
	for _, side := range []string{wmIdem, wmDedup} {
		fmt.Fprintf(w, "| %s | %s | %s |\n", side, summarize(rate[side]).f0(), summarize(cpu[side]).f1())
	}
	fmt.Fprintf(w, "\nidemwatermill ÷ Deduplicator: %s× publishes/s, %s× CPU a publish (median, range over %d rounds; load %s)\n",
		summarize(ratio), summarize(cpuRatio), o.wmRounds, loadAvg())
	// The stack each side's middleware takes from the goroutine the router
	// starts a message: past about 2.8 KiB (4 KiB less the router's frames
	// and the runtime's guard), a message grows its stack twice.
	fmt.Fprintf(w, "\n| side | stack bytes a new event | a duplicate |\n|---|---|---|\n")
	for _, side := range []string{wmIdem, wmDedup} {
		n, d, err := wmStack(side)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(w, "| %s | %d | %d |\n", side, n, d)
	}
	return v, nil
}

func runHTTP(w io.Writer, c *child, o options) ([]string, error) {
	var v []string
	// Replay keys: completed once on each server before the rounds.
	replay := make([]string, 256)
	k := newKeys()
	for i := range replay {
		replay[i] = k.next()
	}
	for _, name := range serverNames {
		hc := client(c.addr[name], 16)
		var wg sync.WaitGroup
		for _, key := range replay {
			wg.Go(func() { _, _, _ = post(hc, "/orders", key, reqBody) })
		}
		wg.Wait()
	}
	for _, wl := range []string{"new keys", "replays"} {
		if part := strings.Fields(wl)[0]; !o.wants("http") && !o.wants(part) {
			continue // -only new or -only replays: one workload, for a server profile of it alone
		}
		keys := replay
		if wl == "new keys" {
			keys = nil
		}
		rps := map[string][]float64{}
		cpu := map[string][]float64{}
		var idemRatio, fiberRatio, idemAdded, fiberAdded []float64
		var loads []string
		for round := range o.rounds {
			order := slices.Clone(serverNames)
			if round%2 == 1 {
				slices.Reverse(order)
			}
			got := map[string]result{}
			for _, name := range order {
				r, err := load(c.pid, c.addr[name], o.conc, o.dur, keys)
				if err != nil {
					return nil, err
				}
				if r.bad > 0 && (name == srvIdem || name == srvBare) {
					v = append(v, fmt.Sprintf("%s, %s: %d requests not answered 201", name, wl, r.bad))
				}
				got[name] = r
				rps[name] = append(rps[name], r.rps())
				cpu[name] = append(cpu[name], r.cpuPerReq())
			}
			loads = append(loads, loadAvg())
			idemRatio = append(idemRatio, got[srvIdem].rps()/got[srvBare].rps())
			fiberRatio = append(fiberRatio, got[srvFiberIdem].rps()/got[srvFiber].rps())
			idemAdded = append(idemAdded, got[srvIdem].cpuPerReq()-got[srvBare].cpuPerReq())
			fiberAdded = append(fiberAdded, got[srvFiberIdem].cpuPerReq()-got[srvFiber].cpuPerReq())
		}
		fmt.Fprintf(w, "\n## HTTP, %s: %d rounds × %v a server, %d clients, alternating order\n\n", wl, o.rounds, o.dur, o.conc)
		fmt.Fprintf(w, "| server | req/s | server CPU µs a request |\n|---|---|---|\n")
		for _, name := range serverNames {
			fmt.Fprintf(w, "| %s | %s | %s |\n", name, summarize(rps[name]).f0(), summarize(cpu[name]).f1())
		}
		fmt.Fprintf(w, "\n| ratio (median, range) | value |\n|---|---|\n")
		fmt.Fprintf(w, "| idemhttp ÷ net/http, req/s | %s |\n", summarize(idemRatio))
		fmt.Fprintf(w, "| Fiber's middleware ÷ Fiber, req/s | %s |\n", summarize(fiberRatio))
		fmt.Fprintf(w, "| idemhttp ÷ Fiber's middleware, req/s | %s |\n", summarize(div(rps[srvIdem], rps[srvFiberIdem])))
		fmt.Fprintf(w, "| idemhttp's added CPU µs a request | %s |\n", summarize(idemAdded).f1())
		fmt.Fprintf(w, "| Fiber's middleware's added CPU µs a request | %s |\n", summarize(fiberAdded).f1())
		fmt.Fprintf(w, "\nload average after each round: %s\n", strings.Join(loads, "; "))
	}
	return v, nil
}

func div(a, b []float64) []float64 {
	out := make([]float64, min(len(a), len(b)))
	for i := range out {
		out[i] = a[i] / b[i]
	}
	return out
}
