package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/idem-go/idem/keystore"
)

// keyOps is what idem keys does to keys: on a store it opens itself
// (storeOps), or through a running idem serve's admin API (adminOps), the
// only way to reach a memory store.
type keyOps interface {
	list(ctx context.Context, o keystore.ListOptions) (keys []keyView, next string, err error)
	show(ctx context.Context, key string) (keyView, error)
	release(ctx context.Context, key string, token uint64) error
	forget(ctx context.Context, key string) error
}

// storeOps are keyOps on a key store.
type storeOps struct{ s keystore.Store }

func (o storeOps) list(ctx context.Context, lo keystore.ListOptions) ([]keyView, string, error) {
	in, err := inspector(o.s)
	if err != nil {
		return nil, "", err
	}
	keys, next, err := in.List(ctx, lo)
	if err != nil {
		return nil, "", err
	}
	now := time.Now()
	views := make([]keyView, 0, len(keys))
	for _, k := range keys {
		views = append(views, viewOf(k, now))
	}
	return views, next, nil
}

func (o storeOps) show(ctx context.Context, key string) (keyView, error) {
	in, err := inspector(o.s)
	if err != nil {
		return keyView{}, err
	}
	k, err := in.Inspect(ctx, key)
	if err != nil {
		return keyView{}, err
	}
	return viewOf(k, time.Now()), nil
}

func (o storeOps) release(ctx context.Context, key string, token uint64) error {
	return releaseKey(ctx, o.s, key, token)
}

func (o storeOps) forget(ctx context.Context, key string) error {
	fg, ok := keystore.As[keystore.Forgetter](o.s)
	if !ok {
		return fmt.Errorf("%w: %T cannot forget keys (no keystore.Forgetter): %w", errKeysUnsupported, o.s, errors.ErrUnsupported)
	}
	return fg.Forget(ctx, key)
}

// adminOps are keyOps through the admin API of a running idem serve
// (--admin-listen with --admin-token-file): GET /admin/keys,
// GET /admin/keys/{key}, POST /admin/keys/{key}/release?token=T and
// POST /admin/keys/{key}/forget, authenticated with the bearer token.
type adminOps struct {
	base  *url.URL
	token string
	c     *http.Client
}

func newAdminOps(base, tokenFile string) (*adminOps, error) {
	u, err := url.Parse(strings.TrimSuffix(base, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--admin %q: want idem serve's --admin-listen address as a URL, http://HOST:PORT", base)
	}
	if tokenFile == "" {
		return nil, errors.New("--admin needs --admin-token-file: the file idem serve's --admin-token-file reads")
	}
	tok, err := readAdminToken(tokenFile)
	if err != nil {
		return nil, err
	}
	return &adminOps{base: u, token: string(tok), c: &http.Client{Timeout: 30 * time.Second}}, nil
}

// adminAPIError is an error answer of the admin API; it unwraps to the
// keystore sentinel its status stands for.
type adminAPIError struct {
	status int
	msg    string
}

func (e *adminAPIError) Error() string {
	return fmt.Sprintf("admin API: %s (HTTP %d)", e.msg, e.status)
}

func (e *adminAPIError) Unwrap() error {
	switch e.status {
	case http.StatusNotFound:
		return keystore.ErrNotFound
	case http.StatusNotImplemented:
		return errors.ErrUnsupported
	}
	return nil
}

// call sends one request and decodes a 200's JSON body into out.
func (o *adminOps) call(ctx context.Context, method, path string, q url.Values, out any) error {
	target := o.base.String() + path
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, target, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+o.token)
	res, err := o.c.Do(req)
	if err != nil {
		return fmt.Errorf("admin API: %w", err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("admin API: %w", err)
	}
	if res.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(body))
		}
		return &adminAPIError{status: res.StatusCode, msg: e.Error}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("admin API: %s %s: %w", method, path, err)
	}
	return nil
}

func keyPath(key string) string { return "/admin/keys/" + url.PathEscape(key) }

func (o *adminOps) list(ctx context.Context, lo keystore.ListOptions) ([]keyView, string, error) {
	q := url.Values{}
	if lo.State != 0 {
		q.Set("state", lo.State.String())
	}
	if lo.After != "" {
		q.Set("after", lo.After)
	}
	if lo.Limit != 0 {
		q.Set("limit", strconv.Itoa(lo.Limit))
	}
	var page struct {
		Keys []keyView `json:"keys"`
		Next string    `json:"next"`
	}
	err := o.call(ctx, http.MethodGet, "/admin/keys", q, &page)
	return page.Keys, page.Next, err
}

func (o *adminOps) show(ctx context.Context, key string) (keyView, error) {
	var v keyView
	err := o.call(ctx, http.MethodGet, keyPath(key), nil, &v)
	return v, err
}

func (o *adminOps) release(ctx context.Context, key string, token uint64) error {
	return o.call(ctx, http.MethodPost, keyPath(key)+"/release", url.Values{"token": {strconv.FormatUint(token, 10)}}, nil)
}

func (o *adminOps) forget(ctx context.Context, key string) error {
	return o.call(ctx, http.MethodPost, keyPath(key)+"/forget", nil, nil)
}
