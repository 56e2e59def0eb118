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
)

// runDedupDisk draws window/diskwindow's curve from the CSV that
// TestDedupDiskCurve writes to IDEM_DEDUP_CSV (make bench-dedup-disk):
//
//	ids,adds_per_s,window_adds_per_s,disk_B_per_id,mem_B_per_id,generations[,adds_per_cpu_s,window_adds_per_cpu_s]
//
// the add rates of the set and of the in-memory window on the same ids,
// and the set's bytes an id on disk and in memory, against the ids held.
// The rates per CPU-second (process CPU time, getrusage), when the CSV has
// them, are drawn beside the wall-clock ones: on a shared machine they are
// the figures that do not move with the load. With before (a CSV of an
// earlier run, "" for none), its rate per CPU-second is drawn beside them,
// named beforeName.
func runDedupDisk(in, out, before, beforeName string) error {
	rows, col, err := readDedupCSV(in)
	if err != nil {
		return err
	}
	var prior plotter.XYs
	if before != "" {
		brows, bcol, err := readDedupCSV(before)
		if err != nil {
			return err
		}
		c, ok := bcol["adds_per_cpu_s"]
		if !ok {
			return fmt.Errorf("%s: no adds_per_cpu_s column", before)
		}
		for _, r := range brows[1:] {
			x, err1 := strconv.ParseFloat(r[0], 64)
			y, err2 := strconv.ParseFloat(r[c], 64)
			if err1 != nil || err2 != nil {
				return fmt.Errorf("%s: %v %v", before, err1, err2)
			}
			prior = append(prior, plotter.XY{X: x / 1e6, Y: y})
		}
	}
	cpu, wcpu := col["adds_per_cpu_s"], col["window_adds_per_cpu_s"]
	var rate, wrate, disk, mem, crate, cwrate plotter.XYs
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
		if cpu > 0 && wcpu > 0 && len(r) > max(cpu, wcpu) {
			c, err1 := strconv.ParseFloat(r[cpu], 64)
			w, err2 := strconv.ParseFloat(r[wcpu], 64)
			if err1 != nil || err2 != nil {
				return fmt.Errorf("%s: CPU rates: %v %v", in, err1, err2)
			}
			crate = append(crate, plotter.XY{X: x, Y: c})
			cwrate = append(cwrate, plotter.XY{X: x, Y: w})
		}
	}
	rp := newPlot("diskwindow AddBatch (4096 UUIDs, fsync a batch, files cold) and window.Dedup", "new ids/s")
	rp.X.Label.Text = "ids in the set (millions)"
	bp := newPlot("bytes an id: disk (sealed files + journal), memory (sealed generations)", "B/id")
	bp.X.Label.Text = rp.X.Label.Text
	legends := []plot.Legend{plot.NewLegend(), plot.NewLegend()}
	for i, s := range []struct {
		row  int
		name string
		xy   plotter.XYs
	}{{0, "diskwindow", rate}, {0, "window (in memory)", wrate}, {1, "disk", disk}, {1, "memory, sealed", mem},
		{0, "diskwindow, per CPU-second", crate}, {0, "window, per CPU-second", cwrate}, {0, beforeName, prior}} {
		if len(s.xy) == 0 {
			continue
		}
		p := []*plot.Plot{rp, bp}[s.row]
		thumbs, err := addLine(p, s.xy, okabeIto[i%len(okabeIto)], i, s.name)
		if err != nil {
			return err
		}
		legends[s.row].Add(s.name, thumbs...)
	}
	for _, g := range []struct {
		row  int
		y    float64
		name string
	}{{0, 200e3, "200k/s goal"}, {1, 8, "8 B/id goal (disk)"}, {1, 1, "1 B/id goal (memory)"}} {
		l, err := plotter.NewLine(plotter.XYs{{X: 0, Y: g.y}, {X: rate[len(rate)-1].X, Y: g.y}})
		if err != nil {
			return err
		}
		l.Color, l.Dashes = color.Gray{Y: 0x80}, []vg.Length{vg.Points(1), vg.Points(3)}
		[]*plot.Plot{rp, bp}[g.row].Add(l)
		legends[g.row].Add(g.name, l)
	}
	g := &grid{plots: [][]*plot.Plot{{rp}, {bp}}, legends: legends, w: 12 * vg.Inch, h: 9 * vg.Inch}
	return g.save(out)
}

// readDedupCSV reads a TestDedupDiskCurve CSV and names its columns.
func readDedupCSV(path string) ([][]string, map[string]int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, nil, err
	}
	if len(rows) < 2 || len(rows[0]) < 5 || rows[0][0] != "ids" {
		return nil, nil, fmt.Errorf("%s: not a TestDedupDiskCurve CSV", path)
	}
	col := map[string]int{}
	for i, name := range rows[0] {
		col[name] = i
	}
	return rows, col, nil
}
