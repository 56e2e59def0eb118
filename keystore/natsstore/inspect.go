package natsstore

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/idem-go/idem/keystore"
)

var (
	_ keystore.Inspector = (*Store)(nil)
	_ keystore.Forgetter = (*Store)(nil)
)

// info converts a key's latest message to a KeyInfo, or reports false for
// a delete marker or a result past its TTL (by the server's timestamps and
// this process's clock).
func info(key string, st stored, withResult bool) (keystore.KeyInfo, bool) {
	if st.marker {
		return keystore.KeyInfo{}, false
	}
	k := keystore.KeyInfo{Key: key, State: keystore.InProgress, Token: st.leaseToken(), Expires: st.time.Add(st.rec.dur), Fingerprint: keystore.HexFingerprint(st.rec.fp)}
	if st.rec.done {
		if !k.Expires.After(time.Now()) {
			return keystore.KeyInfo{}, false
		}
		k.State, k.Token, k.ResultSize = keystore.Done, st.rec.token, len(st.rec.result)
		if withResult {
			k.Result = append([]byte{}, st.rec.result...)
		}
	}
	return k, true
}

// Inspect implements [keystore.Inspector] with one read of the key's
// latest message from the stream leader. Expires is by the server's clock
// (the message's timestamp plus the lease or TTL).
func (s *Store) Inspect(ctx context.Context, key string) (keystore.KeyInfo, error) {
	if err := keystore.ValidateInspect(ctx, key); err != nil {
		return keystore.KeyInfo{}, err
	}
	dctx, cancel := keystore.Detach(ctx)
	defer cancel()
	st, ok, err := s.get(dctx, s.Subject(key))
	if err != nil {
		return keystore.KeyInfo{}, fmt.Errorf("natsstore: inspect: %w", err)
	}
	k, live := info(key, st, true)
	if !ok || !live {
		return keystore.KeyInfo{}, keystore.NotFoundError(key)
	}
	return k, nil
}

// subjects asks the stream for the subjects of the scope's keys (one
// stream-info request, paged by the server's offset).
func (s *Store) scopeSubjects(ctx context.Context) ([]string, error) {
	var all []string
	for offset := 0; ; {
		req, _ := json.Marshal(struct {
			Filter string `json:"subjects_filter"`
			Offset int    `json:"offset,omitempty"`
		}{s.subjects + "*", offset})
		rctx, cancel := context.WithTimeout(ctx, s.timeout)
		msg, err := s.nc.RequestWithContext(rctx, s.apiPrefix+"STREAM.INFO."+s.stream, req)
		cancel()
		if err != nil {
			return nil, err
		}
		var resp struct {
			Total int `json:"total"`
			Limit int `json:"limit"`
			State struct {
				Subjects map[string]uint64 `json:"subjects"`
			} `json:"state"`
			Error *struct {
				Desc string `json:"description"`
			} `json:"error"`
		}
		if err := json.Unmarshal(msg.Data, &resp); err != nil {
			return nil, fmt.Errorf("stream info reply: %w", err)
		}
		if resp.Error != nil {
			return nil, fmt.Errorf("stream info: %s", resp.Error.Desc)
		}
		for subj := range resp.State.Subjects {
			all = append(all, subj)
		}
		offset += len(resp.State.Subjects)
		if len(resp.State.Subjects) == 0 || offset >= resp.Total {
			return all, nil
		}
	}
}

// List implements [keystore.Inspector]: the scope's subjects from one
// stream-info request, in key order after opts.After, then one read per
// key of the page. The cursor is the last key returned. A page may hold
// fewer keys than the limit when some are delete markers or expired.
func (s *Store) List(ctx context.Context, opts keystore.ListOptions) ([]keystore.KeyInfo, string, error) {
	opts, err := keystore.ValidateList(ctx, opts)
	if err != nil {
		return nil, "", err
	}
	dctx, cancel := keystore.Detach(ctx)
	defer cancel()
	subjects, err := s.scopeSubjects(dctx)
	if err != nil {
		return nil, "", fmt.Errorf("natsstore: list: %w", err)
	}
	keys := make([]string, 0, len(subjects))
	for _, subj := range subjects {
		b, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(subj, s.subjects))
		if err == nil && string(b) > opts.After {
			keys = append(keys, string(b))
		}
	}
	slices.Sort(keys)
	next := ""
	if len(keys) > opts.Limit {
		keys = keys[:opts.Limit]
		next = keys[len(keys)-1]
	}
	var out []keystore.KeyInfo
	for _, key := range keys {
		st, ok, err := s.get(dctx, s.Subject(key))
		if err != nil {
			return nil, "", fmt.Errorf("natsstore: list: %w", err)
		}
		if k, live := info(key, st, false); ok && live && (opts.State == 0 || k.State == opts.State) {
			out = append(out, k)
		}
	}
	return out, next, nil
}

// Forget implements [keystore.Forgetter]: a read, then a delete marker
// fenced on the done key's revision.
func (s *Store) Forget(ctx context.Context, key string) error {
	if err := keystore.ValidateInspect(ctx, key); err != nil {
		return err
	}
	dctx, cancel := keystore.Detach(ctx)
	defer cancel()
	subject := s.Subject(key)
	id := callID("f")
	for range 4 {
		st, ok, err := s.get(dctx, subject)
		if err != nil {
			return fmt.Errorf("natsstore: forget: %w", err)
		}
		switch k, live := info(key, st, false); {
		case ok && st.marker && st.release == id:
			return nil // this call's first try landed
		case !ok || !live:
			return keystore.NotFoundError(key)
		case k.State == keystore.InProgress:
			return keystore.ForgetInProgressError(key)
		}
		h := nats.Header{"KV-Operation": []string{"DEL"}, releaseHeader: []string{id}}
		_, err = s.publish(dctx, subject, nil, st.seq, time.Second, id, h)
		if err == nil {
			return nil
		}
		if !errors.Is(err, errConflict) {
			return fmt.Errorf("natsstore: forget: %w", err)
		}
	}
	return fmt.Errorf("natsstore: forget %q: the key kept changing under 4 attempts", key)
}
