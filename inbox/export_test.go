package inbox

import (
	"context"
	"time"

	"github.com/idem-go/idem/inbox/internal/engine/bucket"
	"github.com/idem-go/idem/inbox/internal/engine/bucketsql"
)

// state is in's bucketed layout state; nil for the rows layout.
func state(in *Inbox) *bucket.State {
	r := in.eng.Load()
	if r == nil {
		return nil
	}
	if s, ok := r.Engine.(interface{ State() *bucket.State }); ok {
		return s.State()
	}
	return nil
}

// SkewClock moves in's idea of the database clock by d and stops it from
// being measured again, so a test can put two Inbox values in different
// buckets. It must follow the Inbox's first use.
func SkewClock(in *Inbox, d time.Duration) { state(in).SkewClock(d) }

// BucketWidth is the stored bucket width of in's table; 0 for the rows
// layout.
func BucketWidth(in *Inbox) time.Duration {
	if b := state(in); b != nil {
		return time.Duration(b.Width) * time.Second
	}
	return 0
}

// Filters is the number of lookup filters in's table state holds.
func Filters(in *Inbox) int {
	b := state(in)
	if b == nil {
		return 0
	}
	return b.Filters()
}

// Digest is the 16 bytes in's table stores for key (after in's first use).
func Digest(in *Inbox, key string) []byte {
	d := state(in).Digest(in.consumer, key)
	return d[:]
}

// PackBuckets is Sweep's packing step alone: it returns how many sealed
// buckets it packed.
func PackBuckets(in *Inbox) (int, error) {
	e, ok := in.engine().(*bucketsql.Engine)
	if !ok {
		return 0, nil
	}
	return e.Pack(context.Background())
}
