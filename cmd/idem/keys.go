package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/memstore"
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
	store, scope, output string
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
lease, so a holder that completed meanwhile, or a new holder, is never disturbed.`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.store, "store", "sqlite:idem.db", "key store: memory, sqlite:PATH, postgres://…, redis://…")
	pf.StringVar(&f.scope, "scope", "", "the store's scope (default: the one idem serve uses)")
	pf.StringVarP(&f.output, "output", "o", "text", "text or json (one object per line)")
	cmd.AddCommand(newKeysList(&f), newKeysShow(&f), newKeysRelease(&f), newKeysForget(&f))
	return cmd
}

// withStore opens the store of f for one command.
func withStore(cmd *cobra.Command, f *keysFlags, fn func(ctx context.Context, s keystore.Store) error) error {
	if f.output != "text" && f.output != "json" {
		return fmt.Errorf("keys: --output %q: want text or json", f.output)
	}
	spec, err := parseStoreSpec(f.store)
	if err != nil {
		return fmt.Errorf("keys: %w", err)
	}
	ctx := cmd.Context()
	opened, err := openStore(ctx, spec, keystore.DefaultMaxResultSize)
	if err != nil {
		return fmt.Errorf("keys: open store: %w", err)
	}
	defer opened.close()
	var s = opened.Store
	if f.scope != "" {
		if s, err = keystore.Scope(s, f.scope); err != nil {
			return fmt.Errorf("keys: %w", err)
		}
	}
	return fn(ctx, s)
}

// withInspector is withStore for a command that lists or inspects keys;
// its errors start with "keys <verb>:".
func withInspector(cmd *cobra.Command, f *keysFlags, verb string, fn func(ctx context.Context, in keystore.Inspector) error) error {
	return withStore(cmd, f, func(ctx context.Context, s keystore.Store) error {
		in, err := inspector(s)
		if err == nil {
			err = fn(ctx, in)
		}
		if err != nil {
			return fmt.Errorf("keys %s: %w", verb, err)
		}
		return nil
	})
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
			return withInspector(cmd, f, "list", func(ctx context.Context, in keystore.Inspector) error {
				keys, next, err := in.List(ctx, keystore.ListOptions{State: st, After: after, Limit: limit})
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

func printKeys(out, errOut io.Writer, format string, keys []keystore.KeyInfo, next string) error {
	now := time.Now()
	if format == "json" {
		enc := json.NewEncoder(out)
		for _, k := range keys {
			if err := enc.Encode(viewOf(k, now)); err != nil {
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
	for _, k := range keys {
		v := viewOf(k, now)
		state := v.State
		if v.Lapsed {
			state += " (lapsed)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d B\n", v.Key, state, v.Token, v.Expires.Format(time.RFC3339), v.Fingerprint, v.ResultSize)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if next != "" {
		fmt.Fprintf(out, "more: --after %s\n", next)
	}
	return nil
}

func newKeysShow(f *keysFlags) *cobra.Command {
	var hk httpKeyFlags
	cmd := &cobra.Command{
		Use:   "show KEY | show --idempotency-key K -H 'Authorization: …'",
		Short: "Show one key: state, token, expiry, fingerprint, result (an HTTP key's stored status)",
		Long: `show prints one key. For a key of idem serve, name it by the client's request
instead of the store key: --idempotency-key and the headers that scope it
(-H 'Authorization: Bearer …' by default, or the --scope-header idem serve uses).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, err := hk.storeKey(args)
			if err != nil {
				return fmt.Errorf("keys show: %w", err)
			}
			return withInspector(cmd, f, "show", func(ctx context.Context, in keystore.Inspector) error {
				k, err := in.Inspect(ctx, key)
				if err != nil {
					return err
				}
				v := viewOf(k, time.Now())
				out := cmd.OutOrStdout()
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
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&hk.key, "idempotency-key", "", "the client's Idempotency-Key header value (instead of KEY)")
	fl.StringArrayVarP(&hk.headers, "header", "H", nil, "a header of the client's request, 'Name: value' (repeatable)")
	fl.StringVar(&hk.scopeHeader, "scope-header", "", "the --scope-header idem serve runs with")
	fl.StringVar(&hk.scopeCookie, "scope-cookie", "", "the --scope-cookie idem serve runs with")
	fl.BoolVar(&hk.anonymous, "allow-anonymous", false, "idem serve runs with --allow-anonymous")
	return cmd
}

// httpKeyFlags name an HTTP key by the client's request.
type httpKeyFlags struct {
	key, scopeHeader, scopeCookie string
	headers                       []string
	anonymous                     bool
}

// storeKey is args[0], or the store key of the request the flags describe.
func (h *httpKeyFlags) storeKey(args []string) (string, error) {
	switch {
	case len(args) == 1 && h.key == "":
		return args[0], nil
	case len(args) == 1 || h.key == "":
		return "", errors.New("give either KEY or --idempotency-key")
	}
	r, _ := http.NewRequest(http.MethodPost, "/", nil)
	r.Header.Set(idemhttp.HeaderKey, h.key)
	for _, hv := range h.headers {
		name, value, ok := strings.Cut(hv, ":")
		if !ok {
			return "", fmt.Errorf("--header %q: want 'Name: value'", hv)
		}
		r.Header.Add(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	opts := []idemhttp.Option{idemhttp.WithAllowAnonymous(h.anonymous)}
	if h.scopeHeader != "" {
		opts = append(opts, idemhttp.WithScopeHeader(h.scopeHeader))
	}
	if h.scopeCookie != "" {
		opts = append(opts, idemhttp.WithScopeCookie(h.scopeCookie))
	}
	ms, err := memstore.New() // no store I/O: only the key is derived
	if err != nil {
		return "", err
	}
	defer ms.Close()
	m, err := idemhttp.New(ms, opts...)
	if err != nil {
		return "", err
	}
	return m.StoreKey(r)
}

func newKeysRelease(f *keysFlags) *cobra.Command {
	var token string
	cmd := &cobra.Command{
		Use:   "release KEY --token T",
		Short: "Free an in-progress key whose holder is known dead (fenced by its token)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			tok, err := strconv.ParseUint(token, 10, 64)
			if err != nil || tok == 0 {
				return fmt.Errorf("keys release: --token %q: want the key's token from 'idem keys show' (a positive integer)", token)
			}
			return withStore(cmd, f, func(ctx context.Context, s keystore.Store) error {
				if err := releaseKey(ctx, s, args[0], tok); err != nil {
					return fmt.Errorf("keys release: %w", err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "released %s (token %d): the next request with this key executes\n", args[0], tok)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&token, "token", "", "the lease's token, from 'idem keys show' (required)")
	_ = cmd.MarkFlagRequired("token")
	return cmd
}

func newKeysForget(f *keysFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "forget KEY",
		Short: "Delete a done key's stored result: the next request with it executes again",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withStore(cmd, f, func(ctx context.Context, s keystore.Store) error {
				fg, ok := keystore.As[keystore.Forgetter](s)
				if !ok {
					return fmt.Errorf("keys forget: %w: %T cannot forget keys (no keystore.Forgetter): %w", errKeysUnsupported, s, errors.ErrUnsupported)
				}
				if err := fg.Forget(ctx, args[0]); err != nil {
					return fmt.Errorf("keys forget: %w", err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "forgot %s: the next request with this key executes again\n", args[0])
				return nil
			})
		},
	}
}
