// Package pgnotify wakes outbox relays through PostgreSQL LISTEN/NOTIFY, so
// a message is published as soon as its transaction commits instead of at the
// next poll. outbox.Add notifies the outbox's channel inside the business
// transaction; PostgreSQL delivers the notification at commit.
//
// Notifications are a latency optimisation only: a relay still polls, so a
// lost notification (the listener reconnecting, say) delays a message by at
// most the poll interval and never loses it.
package pgnotify

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idem-go/idem/internal/retry"
)

// Listener listens on one channel and signals C (capacity 1, coalescing)
// for each notification. Pass C to outbox.WithWakeup.
type Listener struct {
	C <-chan struct{}

	cancel context.CancelFunc
	done   chan struct{}
}

// Listen connects to connString and listens on channel (outbox.Outbox's
// Channel()). It reconnects with backoff until Close. It returns an error only
// if the first connection fails.
func Listen(ctx context.Context, connString, channel string, logger *slog.Logger) (*Listener, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	conn, err := connect(ctx, connString, channel)
	if err != nil {
		return nil, err
	}
	c := make(chan struct{}, 1)
	lctx, cancel := context.WithCancel(context.Background())
	l := &Listener{C: c, cancel: cancel, done: make(chan struct{})}
	go l.run(lctx, conn, connString, channel, c, logger)
	return l, nil
}

func connect(ctx context.Context, connString, channel string) (*pgx.Conn, error) {
	conn, err := pgx.Connect(ctx, connString)
	if err != nil {
		return nil, fmt.Errorf("pgnotify: connect: %w", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		conn.Close(ctx)
		return nil, fmt.Errorf("pgnotify: listen: %w", err)
	}
	return conn, nil
}

// reconnectBackoff spaces the attempts to reconnect a lost connection.
var reconnectBackoff = retry.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}

func (l *Listener) run(ctx context.Context, conn *pgx.Conn, connString, channel string, c chan struct{}, logger *slog.Logger) {
	defer close(l.done)
	for {
		_, err := conn.WaitForNotification(ctx)
		if err == nil {
			select {
			case c <- struct{}{}:
			default: // a wakeup is already pending
			}
			continue
		}
		conn.Close(context.Background())
		if ctx.Err() != nil {
			return
		}
		logger.WarnContext(ctx, "pgnotify: connection lost; reconnecting", "err", err)
		for attempt := 0; ; attempt++ {
			if reconnectBackoff.Wait(ctx, attempt) != nil {
				return
			}
			if conn, err = connect(ctx, connString, channel); err == nil {
				select { // something may have committed while we were away
				case c <- struct{}{}:
				default:
				}
				break
			}
			logger.WarnContext(ctx, "pgnotify: reconnect failed", "err", err)
		}
	}
}

// Close stops listening and waits for the listener's goroutine.
func (l *Listener) Close() error {
	l.cancel()
	<-l.done
	return nil
}
