package inbox

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/idem-go/idem/inbox/internal/engine"
	"github.com/idem-go/idem/internal/retry"
	"github.com/idem-go/idem/sqldialect"
)

// A list of the bucket tables that gave up because MySQL's catalog kept
// changing (buckets created and dropped through all eight of its reads)
// read and wrote nothing, so the delivery reruns within its budget instead
// of failing: a flake run at load 17 failed a delivery of
// TestSweepWhileDelivering/mysql with it, four processes sweeping one-second
// buckets every 200 ms. A rerun that keeps meeting it still fails once the
// budget is spent, with the error that says why.
func TestCatalogChangingIsRetried(t *testing.T) {
	t.Parallel()
	changing := fmt.Errorf("inbox: list bucket tables: inbox: list bucket tables: idem_inbox_k1 and others were still being created or dropped after 8 reads of the catalog: %w", engine.ErrCatalogChanging)
	in := &Inbox{dialect: sqldialect.MySQL, cfg: defaultConfig()}
	in.cfg.maxRetries, in.cfg.backoff = 3, retry.Backoff{Min: 1, Max: 1}

	tries := 0
	err := in.withRetry(context.Background(), func() error {
		if tries++; tries <= 2 {
			return changing
		}
		return nil
	})
	if err != nil || tries != 3 {
		t.Fatalf("two lists in flux, then one that reads: err %v after %d tries, want nil after 3", err, tries)
	}

	tries = 0
	err = in.withRetry(context.Background(), func() error { tries++; return changing })
	if !errors.Is(err, engine.ErrCatalogChanging) || tries != 4 {
		t.Fatalf("a catalog that never settles: err %v after %d tries, want ErrCatalogChanging after 4 (the first and 3 reruns)", err, tries)
	}
}
