package inbox

import (
	"context"
	"time"
)

// SkewClock moves in's idea of the database clock by d and stops it from
// being measured again, so a test can put two Inbox values in different
// buckets. It must follow the Inbox's first use.
func SkewClock(in *Inbox, d time.Duration) {
	b := in.bl.Load()
	b.offsetUS.Add(d.Microseconds())
	b.syncedNS.Store(time.Now().Add(time.Hour).UnixNano())
}

// BucketWidth is the stored bucket width of in's table; 0 for the rows
// layout.
func BucketWidth(in *Inbox) time.Duration {
	if b := in.bl.Load(); b != nil {
		return time.Duration(b.width) * time.Second
	}
	return 0
}

// Filters is the number of lookup filters in's table state holds.
func Filters(in *Inbox) int {
	b := in.bl.Load()
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.filters)
}

// Digest is the 16 bytes in's table stores for key (after in's first use).
func Digest(in *Inbox, key string) []byte {
	d := in.bl.Load().digest(in.consumer, key)
	return d[:]
}

// PackBuckets is Sweep's packing step alone: it returns how many sealed
// buckets it packed.
func PackBuckets(in *Inbox) (int, error) {
	return in.packBuckets(context.Background(), in.bl.Load())
}
