// Command benchchart draws the inbox scale curve (docs/img/inbox-scale.svg)
// from the CSV that TestScaleCurve in package inbox appends to
// IDEM_SCALE_CSV (make bench-scale):
//
//	engine,layout,keys,msgs_per_s,buckets,bytes_per_key
//
// It is a module of its own so that idem's core does not depend on the
// plotting library.
//
//	go run ./tools/benchchart -in /tmp/idem-scale.csv -out docs/img/inbox-scale.svg
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
	in := flag.String("in", "", "CSV from TestScaleCurve (IDEM_SCALE_CSV)")
	out := flag.String("out", "docs/img/inbox-scale.svg", "SVG to write")
	flag.Parse()
	if err := run(*in, *out); err != nil {
		fmt.Fprintln(os.Stderr, "benchchart:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	if in == "" {
		return errors.New("-in is required")
	}
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	series, err := read(f)
	if err != nil {
		return err
	}
	if len(series) == 0 {
		return errors.New("no curve rows in " + in)
	}
	rate := newPlot("inbox ProcessBatchSet, 100 msg/tx: rate as the key table grows", "msg/s")
	size := newPlot("bytes per key (table + indexes)", "B/key")
	names := make([]string, 0, len(series))
	for n := range series {
		names = append(names, n)
	}
	sort.Strings(names)
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
