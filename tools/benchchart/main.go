// Command benchchart draws the inbox scale curve (docs/img/inbox-scale.svg)
// from the CSV that TestScaleCurve in package inbox appends to
// IDEM_SCALE_CSV (make bench-scale):
//
//	engine,layout,keys,msgs_per_s,buckets,bytes_per_key
//
// and, with -kind compact, the memory curve of the compact in-memory sets
// (docs/img/compact-memory.svg) from the rows in the same columns that
// TestMemoryCurve in internal/compact appends to IDEM_COMPACT_CURVE_CSV
// (make bench-compact-curve): bytes a key only, against a logarithmic
// count.
//
// With -kind dedupdisk it draws window/diskwindow's curve
// (docs/img/dedup-disk.svg) from TestDedupDiskCurve's IDEM_DEDUP_CSV (make
// bench-dedup-disk).
//
// It is a module of its own so that idem's core does not depend on the
// plotting library.
//
//	go run ./tools/benchchart -in /tmp/idem-scale.csv -out docs/img/inbox-scale.svg
//	go run ./tools/benchchart -kind compact -in /tmp/compact.csv -out docs/img/compact-memory.svg
package main

import (
	"cmp"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"image/color"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

type point struct{ keys, rate, bpk float64 }

func main() {
	in := flag.String("in", "", "CSV from TestScaleCurve (IDEM_SCALE_CSV) or TestMemoryCurve (IDEM_COMPACT_CURVE_CSV)")
	out := flag.String("out", "docs/img/inbox-scale.svg", "SVG to write")
	before := flag.String("before", "", "dedupdisk: an earlier run's CSV, whose rate per CPU-second is drawn beside")
	beforeName := flag.String("before-name", "earlier run, per CPU-second", "dedupdisk: the legend of -before")
	kind := flag.String("kind", "inbox", "inbox (rate and bytes a key), compact (bytes a key, log count) or dedupdisk (window/diskwindow's curve)")
	flag.Parse()
	var err error
	switch *kind {
	case "inbox":
		err = run(*in, *out)
	case "compact":
		err = runCompact(*in, *out)
	case "dedupdisk":
		err = runDedupDisk(*in, *out, *before, *beforeName)
	default:
		err = fmt.Errorf("-kind %q: want inbox, compact or dedupdisk", *kind)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchchart:", err)
		os.Exit(1)
	}
}

// engineTitle names an engine in a chart's title.
var engineTitle = map[string]string{"postgres": "PostgreSQL", "mariadb": "MariaDB", "sqlite": "SQLite"}

// run draws one row of small charts per engine: the rate as the key table
// grows, and the bytes a key beside the bare table's, UUIDv4 against UUIDv7
// keys, with shared axes and each row's legend beside its charts.
func run(in, out string) error {
	series, names, err := load(in)
	if err != nil {
		return err
	}
	engines, byEngine := byFirstWord(names)
	g := &grid{w: 12.5 * vg.Inch, h: vg.Length(len(engines)) * 3.4 * vg.Inch}
	for _, e := range engines {
		title := cmp.Or(engineTitle[e], e)
		rate := newPlot(title+": msg/s, ProcessBatchSet, 100 msg/tx", "msg/s")
		size := newPlot(title+": bytes a key (table + indexes)", "B/key")
		legend := plot.NewLegend()
		for _, n := range byEngine[e] {
			pts := series[n]
			sort.Slice(pts, func(a, b int) bool { return pts[a].keys < pts[b].keys })
			var r, s plotter.XYs
			for _, p := range pts {
				if p.rate > 0 {
					r = append(r, plotter.XY{X: p.keys / 1e6, Y: p.rate})
				}
				if p.bpk > 0 {
					s = append(s, plotter.XY{X: p.keys / 1e6, Y: p.bpk})
				}
			}
			_, layout, _ := strings.Cut(n, " ")
			c, i := layoutStyle(layout)
			for _, target := range []struct {
				p  *plot.Plot
				xy plotter.XYs
			}{{rate, r}, {size, s}} {
				if len(target.xy) == 0 {
					continue
				}
				thumbs, err := addLine(target.p, target.xy, c, i, layout)
				if err != nil {
					return err
				}
				if target.p == rate || len(r) == 0 { // one legend entry a series
					legend.Add(layoutLabel(layout), thumbs...)
				}
			}
		}
		g.plots = append(g.plots, []*plot.Plot{rate, size})
		g.legends = append(g.legends, legend)
	}
	g.shareAxes()
	return g.save(out)
}

// byFirstWord groups names by their first word (an engine, a kind of
// set): the first words in the order they first appear, and each one's
// names in order.
func byFirstWord(names []string) (firsts []string, groups map[string][]string) {
	groups = map[string][]string{}
	for _, n := range names {
		first, _, _ := strings.Cut(n, " ")
		if len(groups[first]) == 0 {
			firsts = append(firsts, first)
		}
		groups[first] = append(groups[first], n)
	}
	return firsts, groups
}

// runCompact draws the compact sets' bytes a key against their count, on
// a logarithmic axis: one small chart a kind of set (the window's one set,
// memstore's 64), shared axes, each row's legend beside it.
func runCompact(in, out string) error {
	series, names, err := load(in)
	if err != nil {
		return err
	}
	kinds, byKind := byFirstWord(names)
	var ticks []plot.Tick
	for _, v := range []float64{0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100} {
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', -1, 64)})
	}
	g := &grid{w: 12 * vg.Inch, h: vg.Length(len(kinds)) * 3.6 * vg.Inch, legendW: 3.7 * vg.Inch}
	for _, kind := range kinds {
		p := plot.New()
		p.Title.Text = kind + ": bytes a key as the set fills (Set.Bytes)"
		p.X.Label.Text = "keys (millions, logarithmic)"
		p.Y.Label.Text = "B/key"
		p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.ConstantTicks(ticks)
		p.X.Min, p.X.Max = 0.1, 0
		legend := plot.NewLegend()
		for i, n := range byKind[kind] {
			pts := series[n]
			sort.Slice(pts, func(a, b int) bool { return pts[a].keys < pts[b].keys })
			var xy plotter.XYs
			for _, pt := range pts {
				if pt.keys > 0 && pt.bpk > 0 {
					xy = append(xy, plotter.XY{X: pt.keys / 1e6, Y: pt.bpk})
					p.X.Max = max(p.X.Max, pt.keys/1e6)
				}
			}
			l, err := plotter.NewLine(xy)
			if err != nil {
				return err
			}
			l.Color = okabeIto[i%len(okabeIto)]
			l.Width = vg.Points(1.5)
			if strings.Contains(n, "one phase") || strings.Contains(n, "without") {
				l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
			}
			p.Add(l)
			legend.Add(strings.TrimPrefix(n, kind+" "), l)
		}
		goal, err := plotter.NewLine(plotter.XYs{{X: 0.1, Y: 24}, {X: p.X.Max, Y: 24}})
		if err != nil {
			return err
		}
		goal.Color, goal.Dashes = color.Gray{Y: 0x80}, []vg.Length{vg.Points(1), vg.Points(3)}
		p.Add(goal)
		legend.Add("24 B/key (issue 16's goal)", goal)
		p.Y.Min = min(p.Y.Min, 20)
		g.plots = append(g.plots, []*plot.Plot{p})
		g.legends = append(g.legends, legend)
	}
	g.shareAxes()
	return g.save(out)
}

// load reads the curve rows of the CSV at in and returns them by series,
// with the series' names sorted.
func load(in string) (map[string][]point, []string, error) {
	if in == "" {
		return nil, nil, errors.New("-in is required")
	}
	f, err := os.Open(in)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	series, err := read(f)
	if err != nil {
		return nil, nil, err
	}
	if len(series) == 0 {
		return nil, nil, errors.New("no curve rows in " + in)
	}
	names := make([]string, 0, len(series))
	for n := range series {
		names = append(names, n)
	}
	sort.Strings(names)
	return series, names, nil
}

func newPlot(title, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "keys in the table (millions)"
	p.Y.Label.Text = y
	p.X.Min, p.Y.Min = 0, 0
	return p
}

// layoutStyle is a layout's colour and glyph, the same in every engine's
// row: UUIDv7 keys blue, UUIDv4 vermillion (a larger page cache dotted in
// the same colour), the rows layout bluish green, packing reddish purple,
// a bare table black.
func layoutStyle(layout string) (color.Color, int) {
	switch {
	case strings.HasPrefix(layout, "bare"):
		return okabeIto[6], 3
	case strings.Contains(layout, "rows"):
		return okabeIto[2], 2
	case strings.Contains(layout, "packed"):
		return okabeIto[3], 4
	case strings.HasPrefix(layout, "v4"):
		return okabeIto[1], 1
	}
	return okabeIto[0], 0
}

// layoutLabel spells a layout out for the legend: "v4-cache256M" is
// "UUIDv4 keys, 256M page cache".
func layoutLabel(layout string) string {
	switch layout {
	case "bare-uuid":
		return "bare table, uuid key"
	case "bare-binary16":
		return "bare table, BINARY(16) key"
	}
	v, variant, _ := strings.Cut(layout, "-")
	label := "UUID" + v + " keys"
	switch {
	case variant == "rows":
		label += ", rows layout"
	case variant == "packed":
		label += ", packed"
	case strings.HasPrefix(variant, "cache"):
		label += ", " + strings.TrimPrefix(variant, "cache") + " page cache"
	case variant != "":
		label += ", " + variant
	}
	return label
}

// addLine adds a line with points to p in colour c and the i'th glyph,
// dashed for a baseline (a bare table, the rows layout) and dotted for a
// variant with a larger page cache, and returns its legend thumbnails.
func addLine(p *plot.Plot, xy plotter.XYs, c color.Color, i int, name string) ([]plot.Thumbnailer, error) {
	l, pts, err := plotter.NewLinePoints(xy)
	if err != nil {
		return nil, err
	}
	l.Color, pts.Color = c, c
	l.Width = vg.Points(1.5)
	pts.Shape = shapes[i%len(shapes)]
	switch {
	case strings.Contains(name, "rows") || strings.Contains(name, "bare"):
		l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
	case strings.Contains(name, "cache"):
		l.Dashes = []vg.Length{vg.Points(1.5), vg.Points(2.5)}
	}
	p.Add(l, pts)
	return []plot.Thumbnailer{l, pts}, nil
}

var shapes = []draw.GlyphDrawer{draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}, draw.CrossGlyph{}, draw.PlusGlyph{}, draw.RingGlyph{}, draw.BoxGlyph{}}

// read parses the curve rows (lines starting "retire," are retention
// measurements and are skipped) into series named "engine layout".
func read(r io.Reader) (map[string][]point, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	out := map[string][]point{}
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if len(rec) != 6 || rec[0] == "retire" || rec[0] == "engine" {
			continue
		}
		var p point
		var perr error
		for i, dst := range []*float64{&p.keys, &p.rate, nil, &p.bpk} {
			if dst == nil {
				continue
			}
			col := []int{2, 3, 4, 5}[i]
			if *dst, perr = strconv.ParseFloat(rec[col], 64); perr != nil {
				return nil, fmt.Errorf("line %v: %w", rec, perr)
			}
		}
		name := rec[0] + " " + rec[1]
		out[name] = append(out[name], p)
	}
}
