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
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

type point struct{ keys, rate, bpk float64 }

func main() {
	in := flag.String("in", "", "CSV from TestScaleCurve (IDEM_SCALE_CSV) or TestMemoryCurve (IDEM_COMPACT_CURVE_CSV)")
	out := flag.String("out", "docs/img/inbox-scale.svg", "SVG to write")
	kind := flag.String("kind", "inbox", "inbox (rate and bytes a key), compact (bytes a key, log count) or dedupdisk (window/diskwindow's curve)")
	flag.Parse()
	var err error
	switch *kind {
	case "inbox":
		err = run(*in, *out)
	case "compact":
		err = runCompact(*in, *out)
	case "dedupdisk":
		err = runDedupDisk(*in, *out)
	default:
		err = fmt.Errorf("-kind %q: want inbox, compact or dedupdisk", *kind)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchchart:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	series, names, err := load(in)
	if err != nil {
		return err
	}
	rate := newPlot("inbox ProcessBatchSet, 100 msg/tx: rate as the key table grows", "msg/s")
	size := newPlot("bytes per key (table + indexes)", "B/key")
	for i, n := range names {
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
		c := palette[i%len(palette)]
		if len(r) > 0 {
			if err := addLine(rate, n, r, c, i); err != nil {
				return err
			}
		}
		if len(s) > 0 {
			if err := addLine(size, n, s, c, i); err != nil {
				return err
			}
		}
	}
	const w, h = 9 * vg.Inch, 10 * vg.Inch
	var canvas vg.CanvasWriterTo
	var dc draw.Canvas
	if strings.HasSuffix(out, ".png") { // for a quick look; the docs use SVG
		c := vgimg.New(w, h)
		canvas, dc = vgimg.PngCanvas{Canvas: c}, draw.New(c)
	} else {
		c := vgsvg.New(w, h)
		canvas, dc = c, draw.New(c)
	}
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadY: vg.Centimeter}
	plots := [][]*plot.Plot{{rate}, {size}}
	canvases := plot.Align(plots, tiles, dc)
	rate.Draw(canvases[0][0])
	size.Draw(canvases[1][0])
	o, err := os.Create(out)
	if err != nil {
		return err
	}
	if _, err := canvas.WriteTo(o); err != nil {
		o.Close()
		return err
	}
	return o.Close()
}

// runCompact draws the compact sets' bytes a key against their count, on
// a logarithmic axis, one line per series.
func runCompact(in, out string) error {
	series, names, err := load(in)
	if err != nil {
		return err
	}
	p := plot.New()
	p.Title.Text = "compact in-memory dedup: bytes a key as the set fills (Set.Bytes)"
	p.X.Label.Text = "keys (millions, logarithmic)"
	p.Y.Label.Text = "B/key"
	var ticks []plot.Tick
	for _, v := range []float64{0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100} {
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', -1, 64)})
	}
	p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.ConstantTicks(ticks)
	p.Y.Min = 16 // room for the legend under the curves
	p.Legend.Top, p.Legend.Left = false, false
	for i, n := range names {
		pts := series[n]
		sort.Slice(pts, func(a, b int) bool { return pts[a].keys < pts[b].keys })
		var xy plotter.XYs
		for _, pt := range pts {
			if pt.keys > 0 && pt.bpk > 0 {
				xy = append(xy, plotter.XY{X: pt.keys / 1e6, Y: pt.bpk})
			}
		}
		l, err := plotter.NewLine(xy)
		if err != nil {
			return err
		}
		l.Color = palette[i%len(palette)]
		if strings.Contains(n, "one phase") {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(l)
		p.Legend.Add(n, l)
	}
	goal, err := plotter.NewLine(plotter.XYs{{X: 0.1, Y: 24}, {X: 100, Y: 24}})
	if err != nil {
		return err
	}
	goal.Color, goal.Dashes = color.Gray{Y: 0x80}, []vg.Length{vg.Points(1), vg.Points(3)}
	p.Add(goal)
	p.Legend.Add("24 B/key (issue 16's goal)", goal)
	p.X.Max = 0
	for _, pts := range series {
		for _, pt := range pts {
			p.X.Max = max(p.X.Max, pt.keys/1e6)
		}
	}
	return p.Save(9*vg.Inch, 6*vg.Inch, out)
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
	p.Legend.Top, p.Legend.Left = true, true
	return p
}

var palette = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
	color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff},
	color.RGBA{R: 0xbc, G: 0xbd, B: 0x22, A: 0xff},
	color.RGBA{R: 0x17, G: 0xbe, B: 0xcf, A: 0xff},
}

func addLine(p *plot.Plot, name string, xy plotter.XYs, c color.Color, i int) error {
	l, pts, err := plotter.NewLinePoints(xy)
	if err != nil {
		return err
	}
	l.Color, pts.Color = c, c
	pts.Shape = draw.GlyphDrawer(shapes[i%len(shapes)])
	if strings.Contains(name, "rows") || strings.Contains(name, "bare") {
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	}
	p.Add(l, pts)
	p.Legend.Add(name, l, pts)
	return nil
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
