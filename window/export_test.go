package window

// GrowthBytes reports the part of d.Bytes held only while its index grows
// (the old index, released when its ids have moved), for the benchmarks.
func GrowthBytes(d *Dedup) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.set.GrowthBytes()
}
