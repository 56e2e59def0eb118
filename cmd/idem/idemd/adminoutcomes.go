package main

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/idem-go/idem/idemhttp"
)

// Bounds of the outcome log: it lives in idem serve's memory for the
// operator page, so neither the routes nor the recent outcomes grow with
// traffic.
const (
	recentOutcomes = 20  // newest outcomes kept per route
	maxRoutes      = 256 // routes tracked; later ones are counted under overflowRoute
	defaultRoute   = "default"
	overflowRoute  = "(other routes)"
)

// outcomeLog records what idem serve did with its keyed requests, per
// route (the pattern of the --config file, or "default" for the flags'
// policy): a counter per outcome since the process started and a ring of
// the newest outcomes. A reload keeps the counts of the patterns it keeps.
type outcomeLog struct {
	mu     sync.Mutex
	routes map[string]*routeOutcomes
	now    func() time.Time
}

type routeOutcomes struct {
	counts map[idemhttp.Outcome]uint64
	recent [recentOutcomes]outcomeEvent
	next   int // where the ring writes next
	n      int // events in the ring
}

type outcomeEvent struct {
	at      time.Time
	outcome idemhttp.Outcome
	took    time.Duration
}

func newOutcomeLog() *outcomeLog {
	return &outcomeLog{routes: map[string]*routeOutcomes{}, now: time.Now}
}

// hooks returns the idemhttp.Hooks of route: it records each outcome, then
// passes it to next (nil: none), with the route when next takes one
// (idemhttpprom's route label).
func (l *outcomeLog) hooks(route string, next idemhttp.Hooks) idemhttp.Hooks {
	return routeHooks{l: l, route: route, next: next}
}

type routeHooks struct {
	l     *outcomeLog
	route string
	next  idemhttp.Hooks
}

// Request implements idemhttp.Hooks.
func (h routeHooks) Request(o idemhttp.Outcome, d time.Duration) {
	h.l.record(h.route, o, d)
	if rh, ok := h.next.(idemhttp.RouteHooks); ok {
		rh.RequestRoute(h.route, o, d)
	} else if h.next != nil {
		h.next.Request(o, d)
	}
}

func (l *outcomeLog) record(route string, o idemhttp.Outcome, d time.Duration) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.routes[route]
	if r == nil {
		if len(l.routes) >= maxRoutes {
			route = overflowRoute
			r = l.routes[route]
		}
		if r == nil {
			r = &routeOutcomes{counts: map[idemhttp.Outcome]uint64{}}
			l.routes[route] = r
		}
	}
	r.counts[o]++
	r.recent[r.next] = outcomeEvent{at: now, outcome: o, took: d}
	r.next = (r.next + 1) % recentOutcomes
	r.n = min(r.n+1, recentOutcomes)
}

// executions are the outcomes of a keyed request the upstream (the
// handler) ran for: the denominator of the replay ratio, with the replays.
var executions = []idemhttp.Outcome{
	idemhttp.OutcomeExecuted, idemhttp.OutcomeReleased, idemhttp.OutcomeNotStored,
	idemhttp.OutcomeLeaseLost, idemhttp.OutcomeLost,
}

// replayRatio is replayed / (replayed + executions): of the keyed requests
// answered by the upstream or from the store, the share answered from the
// store. Requests answered by neither (pass-through, 409 in progress, 422,
// 400, 413, 503, 408, client gone) are not counted. ok is false while the
// denominator is zero.
func replayRatio(counts map[idemhttp.Outcome]uint64) (ratio float64, replayed, ran uint64, ok bool) {
	replayed = counts[idemhttp.OutcomeReplayed]
	for _, o := range executions {
		ran += counts[o]
	}
	if replayed+ran == 0 {
		return 0, 0, 0, false
	}
	return float64(replayed) / float64(replayed+ran), replayed, ran, true
}

// routeView is one route as the operator page shows it.
type routeView struct {
	Route        string
	Total        uint64
	Counts       []outcomeCount // non-zero only, by outcome name
	Replayed     uint64
	Ran          uint64
	Ratio        string // "—" before any replay or execution
	Recent       []eventView
	RecentWindow int
}

type outcomeCount struct {
	Outcome string
	N       uint64
}

type eventView struct {
	Ago, Outcome, Took string
}

// snapshot is every route's view at now, routes by name, recent outcomes
// newest first.
func (l *outcomeLog) snapshot() []routeView {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	views := make([]routeView, 0, len(l.routes))
	for name, r := range l.routes {
		v := routeView{Route: name, RecentWindow: recentOutcomes}
		for o, n := range r.counts {
			v.Total += n
			v.Counts = append(v.Counts, outcomeCount{string(o), n})
		}
		slices.SortFunc(v.Counts, func(a, b outcomeCount) int { return cmp.Compare(a.Outcome, b.Outcome) })
		ratio, rep, ran, ok := replayRatio(r.counts)
		v.Replayed, v.Ran, v.Ratio = rep, ran, "—"
		if ok {
			v.Ratio = fmt.Sprintf("%.1f%%", 100*ratio)
		}
		for i := 1; i <= r.n; i++ {
			e := r.recent[(r.next-i+recentOutcomes)%recentOutcomes]
			v.Recent = append(v.Recent, eventView{Ago: humanDuration(now.Sub(e.at)) + " ago", Outcome: string(e.outcome), Took: humanDuration(e.took)})
		}
		views = append(views, v)
	}
	slices.SortFunc(views, func(a, b routeView) int { return cmp.Compare(a.Route, b.Route) })
	return views
}

// humanDuration rounds d for a person: 850ms, 12.3s, 4m10s, 3h2m0s.
func humanDuration(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}
