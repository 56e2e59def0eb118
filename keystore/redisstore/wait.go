package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/keystore"
)

// ErrNotReplicated is wrapped by the error of a write that fewer replicas
// acknowledged than [WithWaitReplicas] asks for. The write happened on the
// master; see WithWaitReplicas for what each call leaves behind.
var ErrNotReplicated = errors.New("redisstore: write not acknowledged by enough replicas")

// waitReplicas sends a script and a WAIT on one connection: WAIT counts
// the replicas that acknowledged every write of its own connection, so it
// must follow the script on the connection that carried it.
type waitReplicas struct {
	n  int
	ms int64
}

// process runs cmd then WAIT n ms on the master of rkey, as one pipeline
// on one connection, under keystore.Detach(ctx). On a Cluster it asks the
// client which master serves rkey's slot; a MOVED or ASK reply (a slot
// that moved, a failover not yet seen) reloads the slot map and tries once
// more: the script did not run.
func (w *waitReplicas) process(ctx context.Context, rdb redis.UniversalClient, rkey string, cmd redis.Cmder) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	dctx, cancel := keystore.Detach(ctx)
	defer cancel()
	for attempt := 0; ; attempt++ {
		pipe := rdb.Pipeline()
		cc, cluster := rdb.(*redis.ClusterClient)
		if cluster {
			node, err := cc.MasterForKey(dctx, rkey)
			if err != nil {
				cmd.SetErr(err)
				return err
			}
			pipe = node.Pipeline()
		}
		_ = pipe.Process(dctx, cmd)
		wait := pipe.Do(dctx, "wait", w.n, w.ms)
		_, _ = pipe.Exec(dctx)
		err := cmd.Err()
		if err != nil && cluster && attempt == 0 && (strings.HasPrefix(err.Error(), "MOVED ") || strings.HasPrefix(err.Error(), "ASK ")) {
			cc.ReloadState(dctx)
			cmd.SetErr(nil)
			continue
		}
		if err != nil {
			return err
		}
		got, werr := wait.Int64()
		switch {
		case werr != nil:
			err = fmt.Errorf("%w: WAIT: %w", ErrNotReplicated, werr)
		case got < int64(w.n):
			err = fmt.Errorf("%w: %d of %d replicas within %d ms", ErrNotReplicated, got, w.n, w.ms)
		}
		if err != nil {
			cmd.SetErr(err) // the reply stays readable, for releaseUnreplicated
		}
		return err
	}
}

// releaseUnreplicated gives back a lease whose Reserve reply (v) says
// Acquired but which the replicas did not acknowledge: its caller gets an
// error and will not run the effect, so a retry should find the key free.
// Best effort, not waited for: if it is lost, the lease expires.
func (s *Store) releaseUnreplicated(ctx context.Context, rkey, v string) {
	code, token, _, _, _, err := parseReserve(v)
	if err != nil || code != 0 {
		return
	}
	dctx, cancel := keystore.Detach(ctx)
	defer cancel()
	a := []any{"evalsha", s.release.hash, 1, rkey, fmt.Sprint(token)}
	if e := s.conn.process(dctx, redis.NewIntCmd(dctx, a...)); e != nil && strings.HasPrefix(e.Error(), "NOSCRIPT") {
		a[0], a[1] = "eval", s.release.src
		_ = s.conn.process(dctx, redis.NewIntCmd(dctx, a...))
	}
}
