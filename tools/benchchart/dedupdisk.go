package main

import (
	"encoding/csv"
	"fmt"
	"image/color"
	"os"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// runDedupDisk draws window/diskwindow's curve from the CSV that
// TestDedupDiskCurve writes to IDEM_DEDUP_CSV (make bench-dedup-disk):
//
//	ids,adds_per_s,window_adds_per_s,disk_B_per_id,mem_B_per_id,generations
//
// the add rates of the set and of the in-memory window on the same ids,
// and the set's bytes an id on disk and in memory, against the ids held.
func runDedupDisk(in, out string) error {
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return err
	}
	if len(rows) < 2 || len(rows[0]) < 5 || rows[0][0] != "ids" {
		return fmt.Errorf("%s: not a TestDedupDiskCurve CSV", in)
	}
	var rate, wrate, disk, mem plotter.XYs
	for _, r := range rows[1:] {
		v := make([]float64, 5)
		for i := range v {
			if v[i], err = strconv.ParseFloat(r[i], 64); err != nil {
				return fmt.Errorf("%s: %w", in, err)
			}
		}
		x := v[0] / 1e6
		rate = append(rate, plotter.XY{X: x, Y: v[1]})
		wrate = append(wrate, plotter.XY{X: x, Y: v[2]})
		disk = append(disk, plotter.XY{X: x, Y: v[3]})
		if v[4] > 0 {
			mem = append(mem, plotter.XY{X: x, Y: v[4]})
		}
	}
	rp := newPlot("window/diskwindow AddBatch (4096 UUIDs, fsync a batch, sealed files cold) beside window.Dedup", "new ids/s")
	rp.X.Label.Text = "ids in the set (millions)"
	bp := newPlot("bytes an id: disk (sealed files + journal), memory (sealed generations)", "B/id")
	bp.X.Label.Text = rp.X.Label.Text
	for i, s := range []struct {
		p    *plot.Plot
		name string
		xy   plotter.XYs
	}{{rp, "diskwindow", rate}, {rp, "window (in memory)", wrate}, {bp, "disk", disk}, {bp, "memory, sealed", mem}} {
		if len(s.xy) == 0 {
			continue
		}
		if err := addLine(s.p, s.name, s.xy, palette[i%len(palette)], i); err != nil {
			return err
		}
	}
	for _, g := range []struct {
		p    *plot.Plot
		y    float64
		name string
	}{{rp, 200e3, "200k/s goal"}, {bp, 8, "8 B/id goal (disk)"}, {bp, 1, "1 B/id goal (memory)"}} {
		l, err := plotter.NewLine(plotter.XYs{{X: 0, Y: g.y}, {X: rate[len(rate)-1].X, Y: g.y}})
		if err != nil {
			return err
		}
		l.Color, l.Dashes = color.Gray{Y: 0x80}, []vg.Length{vg.Points(1), vg.Points(3)}
		g.p.Add(l)
		g.p.Legend.Add(g.name, l)
	}
	c := vgsvg.New(9*vg.Inch, 10*vg.Inch)
	canvases := plot.Align([][]*plot.Plot{{rp}, {bp}}, draw.Tiles{Rows: 2, Cols: 1, PadY: vg.Centimeter}, draw.New(c))
	rp.Draw(canvases[0][0])
	bp.Draw(canvases[1][0])
	o, err := os.Create(out)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(o); err != nil {
		o.Close()
		return err
	}
	return o.Close()
}
