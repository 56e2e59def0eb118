package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/keystore"
)

// keyView is one key as idem keys and the admin API show it.
type keyView struct {
	Key         string    `json:"key"`
	State       string    `json:"state"`
	Token       uint64    `json:"token,omitempty"`
	Expires     time.Time `json:"expires"`
	Lapsed      bool      `json:"lapsed,omitempty"`
	Fingerprint string    `json:"fingerprint,omitempty"`
	ResultSize  int       `json:"result_size"`
	// HTTP is set for a done key written by idemhttp (idem serve).
	HTTP *httpView `json:"http,omitempty"`
}

type httpView struct {
	Status    int  `json:"status"`
	NotStored bool `json:"not_stored,omitempty"`
	Lost      bool `json:"response_lost,omitempty"`
}

func viewOf(k keystore.KeyInfo, now time.Time) keyView {
	v := keyView{Key: k.Key, State: k.State.String(), Token: k.Token, Expires: k.Expires, Lapsed: k.Lapsed(now), Fingerprint: k.Fingerprint, ResultSize: k.ResultSize}
	if k.State == keystore.Done && k.Result != nil && idemhttp.IsStoreKey(k.Key) {
		if st, ns, lost, err := idemhttp.DescribeRecord(k.Result); err == nil {
			v.HTTP = &httpView{Status: st, NotStored: ns, Lost: lost}
		}
	}
	return v
}

var errKeysUnsupported = errors.New("the store cannot do this")

// inspector returns s as a keystore.Inspector.
func inspector(s keystore.Store) (keystore.Inspector, error) {
	in, ok := keystore.As[keystore.Inspector](s)
	if !ok {
		return nil, fmt.Errorf("%w: %T cannot list or inspect keys (no keystore.Inspector): %w", errKeysUnsupported, s, errors.ErrUnsupported)
	}
	return in, nil
}

// releaseKey is the operator's fenced release, with the error an operator
// needs when the token is stale.
func releaseKey(ctx context.Context, s keystore.Store, key string, token uint64) error {
	err := keystore.ReleaseToken(ctx, s, key, token)
	if errors.Is(err, keystore.ErrLeaseLost) {
		return fmt.Errorf("refused: token %d is not the current lease of %q (its holder completed or released it, or another holder took it over); nothing was changed, see 'idem keys show': %w", token, key, err)
	}
	return err
}

type keysFlags struct {
	store, scope, output  string
	admin, adminTokenFile string
}

func newKeys() *cobra.Command {
	var f keysFlags
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "List, inspect, release and forget keys in a key store",
		Long: `keys shows an operator the keys of a key store (the --store URLs of idem serve)
and frees the ones that are stuck.

  idem keys list --state in_progress        leases, live or lapsed (lapsed: the holder died)
  idem keys show KEY                         one key; for idem serve's keys, the stored HTTP status
  idem keys release KEY --token T            free an in-progress key whose holder is known dead
  idem keys forget KEY                       delete a done key: the next request executes again

release is fenced: it succeeds only while T (from list or show) is still the key's
lease, so a holder that completed meanwhile, or a new holder, is never disturbed.

A key of idem serve is a digest of the client's principal and Idempotency-Key
(stores keep only the digest). show, release and forget find it from the
client's request instead of KEY:

  idem keys show --idempotency-key '"order-1"' -H 'X-Account-Id: a1' \
      --config gateway.yaml --route 'POST /v1/charges'

--config and --route take the route's scope from the file idem serve runs with.

With --admin, keys talks to a running idem serve's admin API (its
--admin-listen address, with the token of its --admin-token-file) instead of
opening a store: the only way to reach a memory store, and the same for any.

  idem keys --admin http://127.0.0.1:9090 --admin-token-file admin.token list`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.store, "store", "sqlite:idem.db", "key store: memory, sqlite:PATH, postgres://…, redis://… (a memory store lives in its idem serve: use --admin)")
	pf.StringVar(&f.scope, "scope", "", "the store's scope (default: the one idem serve uses)")
	pf.StringVarP(&f.output, "output", "o", "text", "text or json (one object per line)")
	pf.StringVar(&f.admin, "admin", "", "instead of --store: the admin API of a running idem serve, http://HOST:PORT (its --admin-listen)")
	pf.StringVar(&f.adminTokenFile, "admin-token-file", "", "with --admin: the file of idem serve's --admin-token-file")
	cmd.AddCommand(newKeysList(&f), newKeysShow(&f), newKeysRelease(&f), newKeysForget(&f))
	return cmd
}

// withKeys runs fn on the keys f names: through idem serve's admin API
// with --admin, else on the store it opens. Errors start with
// "keys <verb>:".
func withKeys(cmd *cobra.Command, f *keysFlags, verb string, fn func(ctx context.Context, ops keyOps) error) error {
	err := func() error {
		if f.output != "text" && f.output != "json" {
			return fmt.Errorf("--output %q: want text or json", f.output)
		}
		ctx := cmd.Context()
		if f.admin != "" {
			if cmd.Flags().Changed("store") || f.scope != "" {
				return errors.New("--admin talks to idem serve, which has its store: drop --store and --scope")
			}
			ops, err := newAdminOps(f.admin, f.adminTokenFile)
			if err != nil {
				return err
			}
			return fn(ctx, ops)
		}
		if f.adminTokenFile != "" {
			return errors.New("--admin-token-file goes with --admin")
		}
		spec, err := parseStoreSpec(f.store)
		if err != nil {
			return err
		}
		if spec.kind == "memory" && spec.arg == "" {
			return fmt.Errorf("--store %s: a memory store lives inside its idem serve process; reach it through the admin API: --admin http://ADMIN-LISTEN --admin-token-file FILE", f.store)
		}
		opened, err := openStore(ctx, spec, keystore.DefaultMaxResultSize)
		if err != nil {
			return fmt.Errorf("open store: %w", err)
		}
		defer opened.close()
		var s = opened.Store
		if f.scope != "" {
			if s, err = keystore.Scope(s, f.scope); err != nil {
				return err
			}
		}
		return fn(ctx, storeOps{s})
	}()
	if err != nil {
		return fmt.Errorf("keys %s: %w", verb, err)
	}
	return nil
}

func newKeysList(f *keysFlags) *cobra.Command {
	var state, after string
	var limit int
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List keys, filtered by state, one page at a time",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := keystore.ParseState(state)
			if err != nil {
				return fmt.Errorf("keys list: --state: %w", err)
			}
			return withKeys(cmd, f, "list", func(ctx context.Context, ops keyOps) error {
				keys, next, err := ops.list(ctx, keystore.ListOptions{State: st, After: after, Limit: limit})
				if err != nil {
					return err
				}
				return printKeys(cmd.OutOrStdout(), cmd.ErrOrStderr(), f.output, keys, next)
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&state, "state", "any", "in_progress, done or any")
	fl.IntVar(&limit, "limit", keystore.DefaultListLimit, fmt.Sprintf("most keys to list (at most %d)", keystore.MaxListLimit))
	fl.StringVar(&after, "after", "", "continue a listing: the cursor the previous page printed")
	return cmd
}

// hashedKeyNote follows a text listing with idem serve's keys in it: the
// store holds only their digest.
const hashedKeyNote = `http:… keys are idem serve's: a digest of the client's principal and
Idempotency-Key, the only form the store keeps (the header's text is never
stored). Find a client's key from its request:
  idem keys show --idempotency-key VALUE -H 'Authorization: …' [--config FILE --route 'POST /path']`

func printKeys(out, errOut io.Writer, format string, keys []keyView, next string) error {
	if format == "json" {
		enc := json.NewEncoder(out)
		for _, v := range keys {
			if err := enc.Encode(v); err != nil {
				return err
			}
		}
		if next != "" {
			fmt.Fprintf(errOut, "more: --after %s\n", next)
		}
		return nil
	}
	tw := tabwriter.NewWriter(out, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tSTATE\tTOKEN\tEXPIRES\tFINGERPRINT\tRESULT")
	hashed := false
	for _, v := range keys {
		state := v.State
		if v.Lapsed {
			state += " (lapsed)"
		}
		hashed = hashed || idemhttp.IsStoreKey(v.Key)
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d B\n", v.Key, state, v.Token, v.Expires.Format(time.RFC3339), v.Fingerprint, v.ResultSize)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if next != "" {
		fmt.Fprintf(out, "more: --after %s\n", next)
	}
	if hashed {
		fmt.Fprintf(errOut, "\n%s\n", hashedKeyNote)
	}
	return nil
}

// keyCommand completes cmd, a keys subcommand on one key: the store key
// that its argument or the HTTP key flags it adds name (hk.storeKey), on
// which it runs fn through withKeys, fn writing to cmd's output. Errors
// start with "keys <verb>:".
func keyCommand(f *keysFlags, verb string, cmd *cobra.Command, fn func(ctx context.Context, out io.Writer, ops keyOps, key string) error) *cobra.Command {
	var hk httpKeyFlags
	cmd.Args = cobra.MaximumNArgs(1)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		key, err := hk.storeKey(args)
		if err != nil {
			return fmt.Errorf("keys %s: %w", verb, err)
		}
		return withKeys(cmd, f, verb, func(ctx context.Context, ops keyOps) error {
			return fn(ctx, cmd.OutOrStdout(), ops, key)
		})
	}
	addHTTPKeyFlags(cmd.Flags(), &hk)
	return cmd
}

func newKeysShow(f *keysFlags) *cobra.Command {
	return keyCommand(f, "show", &cobra.Command{
		Use:   "show KEY | show --idempotency-key K -H 'Authorization: …'",
		Short: "Show one key: state, token, expiry, fingerprint, result (an HTTP key's stored status)",
		Long: `show prints one key. For a key of idem serve, name it by the client's request
instead of the store key: --idempotency-key and the headers that scope it
(-H 'Authorization: Bearer …' by default, or the header of the route's scope:
--config FILE --route 'POST /path', or --scope-header as idem serve runs).`,
	}, func(ctx context.Context, out io.Writer, ops keyOps, key string) error {
		v, err := ops.show(ctx, key)
		if err != nil {
			return err
		}
		if f.output == "json" {
			return json.NewEncoder(out).Encode(v)
		}
		fmt.Fprintf(out, "key:          %s\nstate:        %s\n", v.Key, v.State)
		if v.Lapsed {
			fmt.Fprintln(out, "              lapsed: the holder neither completed nor released it; the next request takes it over")
		}
		fmt.Fprintf(out, "token:        %d\nexpires:      %s\nfingerprint:  %s\nresult size:  %d B\n", v.Token, v.Expires.Format(time.RFC3339Nano), v.Fingerprint, v.ResultSize)
		if v.HTTP != nil {
			fmt.Fprintf(out, "http status:  %d", v.HTTP.Status)
			switch {
			case v.HTTP.NotStored:
				fmt.Fprint(out, " (response not stored: replays answer 410)")
			case v.HTTP.Lost:
				fmt.Fprint(out, " (response lost mid-body: replays answer 502)")
			}
			fmt.Fprintln(out)
		}
		return nil
	})
}

func newKeysRelease(f *keysFlags) *cobra.Command {
	var token string
	var tok uint64
	cmd := keyCommand(f, "release", &cobra.Command{
		Use:   "release (KEY | --idempotency-key K -H …) --token T",
		Short: "Free an in-progress key whose holder is known dead (fenced by its token)",
		PreRunE: func(*cobra.Command, []string) error {
			var err error
			if tok, err = strconv.ParseUint(token, 10, 64); err != nil || tok == 0 {
				return fmt.Errorf("keys release: --token %q: want the key's token from 'idem keys show' (a positive integer)", token)
			}
			return nil
		},
	}, func(ctx context.Context, out io.Writer, ops keyOps, key string) error {
		if err := ops.release(ctx, key, tok); err != nil {
			return err
		}
		fmt.Fprintf(out, "released %s (token %d): the next request with this key executes\n", key, tok)
		return nil
	})
	cmd.Flags().StringVar(&token, "token", "", "the lease's token, from 'idem keys show' (required)")
	_ = cmd.MarkFlagRequired("token")
	return cmd
}

func newKeysForget(f *keysFlags) *cobra.Command {
	return keyCommand(f, "forget", &cobra.Command{
		Use:   "forget (KEY | --idempotency-key K -H …)",
		Short: "Delete a done key's stored result: the next request with it executes again",
	}, func(ctx context.Context, out io.Writer, ops keyOps, key string) error {
		if err := ops.forget(ctx, key); err != nil {
			return err
		}
		fmt.Fprintf(out, "forgot %s: the next request with this key executes again\n", key)
		return nil
	})
}
