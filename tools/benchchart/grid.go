package main

import (
	"cmp"
	"image/color"
	"os"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// okabeIto is the colour-blind-safe palette of Okabe and Ito (2008), black
// last: it reads the same for the common colour-vision deficiencies.
var okabeIto = []color.Color{
	color.RGBA{R: 0x00, G: 0x72, B: 0xb2, A: 0xff}, // blue
	color.RGBA{R: 0xd5, G: 0x5e, B: 0x00, A: 0xff}, // vermillion
	color.RGBA{R: 0x00, G: 0x9e, B: 0x73, A: 0xff}, // bluish green
	color.RGBA{R: 0xcc, G: 0x79, B: 0xa7, A: 0xff}, // reddish purple
	color.RGBA{R: 0xe6, G: 0x9f, B: 0x00, A: 0xff}, // orange
	color.RGBA{R: 0x56, G: 0xb4, B: 0xe9, A: 0xff}, // sky blue
	color.RGBA{R: 0x00, G: 0x00, B: 0x00, A: 0xff}, // black
}

// grid is a figure of small charts: rows of plots sharing their columns'
// axes, and a legend for each row drawn in a column of its own, to the
// right of the data, never over it.
type grid struct {
	plots   [][]*plot.Plot // rows × columns; nil leaves a tile empty
	legends []plot.Legend  // one a row
	w, h    vg.Length      // the whole figure
	legendW vg.Length      // the legends' strip on the right (0: 3.1 inches)
}

// shareAxes gives every plot of a column the same X and Y ranges, so that
// small charts compare at a glance.
func (g *grid) shareAxes() {
	for col := range g.plots[0] {
		var xmin, xmax, ymin, ymax float64
		first := true
		for _, row := range g.plots {
			p := row[col]
			if p == nil {
				continue
			}
			if first {
				xmin, xmax, ymin, ymax = p.X.Min, p.X.Max, p.Y.Min, p.Y.Max
				first = false
				continue
			}
			xmin, xmax = min(xmin, p.X.Min), max(xmax, p.X.Max)
			ymin, ymax = min(ymin, p.Y.Min), max(ymax, p.Y.Max)
		}
		for _, row := range g.plots {
			if p := row[col]; p != nil {
				p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = xmin, xmax, ymin, ymax*1.08 // room under the title
			}
		}
	}
}

// save draws the figure to out: SVG, or PNG when out ends in .png (to look
// at a chart before it goes into the docs).
func (g *grid) save(out string) error {
	var canvas vg.CanvasWriterTo
	var dc draw.Canvas
	if strings.HasSuffix(out, ".png") {
		c := vgimg.NewWith(vgimg.UseWH(g.w, g.h), vgimg.UseDPI(110))
		canvas, dc = vgimg.PngCanvas{Canvas: c}, draw.New(c)
	} else {
		c := vgsvg.New(g.w, g.h)
		canvas, dc = c, draw.New(c)
	}
	// The charts take the figure but a strip on the right, where each
	// row's legend is drawn level with its row.
	legendWidth := cmp.Or(g.legendW, 3.1*vg.Inch)
	charts := draw.Crop(dc, 0, -legendWidth, 0, 0)
	tiles := draw.Tiles{Rows: len(g.plots), Cols: len(g.plots[0]), PadX: vg.Centimeter, PadY: vg.Centimeter / 2, PadTop: vg.Centimeter / 4}
	canvases := plot.Align(g.plots, tiles, charts)
	for i, r := range g.plots {
		for j, p := range r {
			if p != nil {
				p.Draw(canvases[i][j])
			}
		}
		if i < len(g.legends) {
			l := g.legends[i]
			l.Top, l.Left = true, true
			row := canvases[i][len(r)-1]
			strip := dc
			strip.Min.X, strip.Max.X = charts.Max.X+vg.Centimeter/2, dc.Max.X
			strip.Min.Y, strip.Max.Y = row.Min.Y, row.Max.Y
			l.Draw(strip)
		}
	}
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
