package main

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"html/template"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idem-go/idem/keystore"
)

//go:embed templates
var pageFiles embed.FS

var pageTemplates = template.Must(template.ParseFS(pageFiles, "templates/*.html"))

// The operator page's cookie and how long a sign-in lasts.
const (
	sessionCookie = "idem_admin_session"
	sessionTTL    = 8 * time.Hour
	pagePath      = "/admin/ui"
	pageKeys      = 100 // keys in progress per page
)

// adminPage serves the operator page of idem serve's admin listener, under
// /admin/ui, to the holder of the admin token:
//
//	GET  /admin/ui            keys in progress, outcomes per route (401: the sign-in form)
//	POST /admin/ui/login      token=T: sets the session cookie
//	POST /admin/ui/release    key=K token=N csrf=C: the key API's fenced release
//	POST /admin/ui/logout     csrf=C: clears the cookie
//	GET  /admin/ui/style.css
//
// A browser signs in once with the token; the session cookie holds an
// expiry and a random nonce signed with a key derived from the token
// (HMAC-SHA256), never the token, so it needs no server-side state, works
// across idem serve processes sharing the token, and is void once the token
// changes. It is HttpOnly, SameSite=Strict, and Secure over TLS. A POST
// signed in by the cookie must carry the session's CSRF token (an HMAC of
// the session, compared in constant time): SameSite=Strict alone is a
// browser's promise, not the server's check. A request with
// "Authorization: Bearer <token>" is accepted too and needs no CSRF token:
// no browser attaches that header by itself.
type adminPage struct {
	s        keystore.Store
	log      *slog.Logger
	outcomes *outcomeLog
	held     *heldKeys         // nil: ages and routes unknown
	bearer   [sha256.Size]byte // SHA-256 of the token
	key      []byte            // signs sessions and CSRF tokens
	now      func() time.Time
	mux      *http.ServeMux
}

func newAdminPage(s keystore.Store, token []byte, outcomes *outcomeLog, held *heldKeys, log *slog.Logger) *adminPage {
	m := hmac.New(sha256.New, token)
	m.Write([]byte("idem serve operator page session key v1"))
	p := &adminPage{s: s, log: log, outcomes: outcomes, held: held, bearer: sha256.Sum256(token), key: m.Sum(nil), now: time.Now, mux: http.NewServeMux()}
	p.mux.HandleFunc("GET "+pagePath+"/style.css", p.style)
	p.mux.HandleFunc("GET "+pagePath, p.authed(p.page))
	p.mux.HandleFunc("POST "+pagePath+"/login", p.login)
	p.mux.HandleFunc("POST "+pagePath+"/logout", p.authed(p.logout))
	p.mux.HandleFunc("POST "+pagePath+"/release", p.authed(p.release))
	return p
}

func (p *adminPage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	p.mux.ServeHTTP(w, r)
}

// session is who a request is signed in as.
type session struct {
	csrf   string // "" for a bearer request, which needs none
	bearer bool
}

// authed runs h for a request with the bearer token or a valid session
// cookie, and, for a cookie's POST, a valid CSRF token; it answers 401 (the
// sign-in form) or 403 otherwise, before h can change anything.
func (p *adminPage) authed(h func(http.ResponseWriter, *http.Request, session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
			sum := sha256.Sum256([]byte(got))
			if subtle.ConstantTimeCompare(sum[:], p.bearer[:]) != 1 {
				p.render(w, http.StatusUnauthorized, "login.html", pageData{Title: "sign in", Notice: &notice{"error", "Wrong bearer token."}})
				return
			}
			h(w, r, session{bearer: true})
			return
		}
		c, err := r.Cookie(sessionCookie)
		var id []byte
		if err == nil {
			id, err = p.verify(c.Value)
		}
		if err != nil {
			n := &notice{"error", "Sign in with the admin token."}
			if c != nil {
				n.Text = "Your session has ended or is not valid here: sign in again."
			}
			p.render(w, http.StatusUnauthorized, "login.html", pageData{Title: "sign in", Notice: n})
			return
		}
		s := session{csrf: p.csrfOf(id)}
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
			if subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(s.csrf)) != 1 {
				p.render(w, http.StatusForbidden, "refused.html", pageData{Title: "refused", Notice: &notice{"error", "Refused: the form's CSRF token is missing or wrong (reload the page and try again). Nothing was changed."}})
				return
			}
		}
		h(w, r, s)
	}
}

// newSession is a cookie value: expiry (8 bytes) and a 16-byte nonce,
// then the HMAC of both, each part base64url.
func (p *adminPage) newSession() string {
	id := make([]byte, 24)
	binary.BigEndian.PutUint64(id, uint64(p.now().Add(sessionTTL).Unix()))
	_, _ = rand.Read(id[8:])
	return base64.RawURLEncoding.EncodeToString(id) + "." + base64.RawURLEncoding.EncodeToString(p.sign("session", id))
}

var errSession = errors.New("not a valid session")

// verify returns the session of a cookie value it signed that has not
// expired.
func (p *adminPage) verify(v string) ([]byte, error) {
	a, b, ok := strings.Cut(v, ".")
	id, err1 := base64.RawURLEncoding.DecodeString(a)
	mac, err2 := base64.RawURLEncoding.DecodeString(b)
	if !ok || err1 != nil || err2 != nil || len(id) != 24 || !hmac.Equal(mac, p.sign("session", id)) {
		return nil, errSession
	}
	if time.Unix(int64(binary.BigEndian.Uint64(id)), 0).Before(p.now()) {
		return nil, errSession
	}
	return id, nil
}

func (p *adminPage) sign(purpose string, id []byte) []byte {
	m := hmac.New(sha256.New, p.key)
	m.Write([]byte(purpose))
	m.Write([]byte{0})
	m.Write(id)
	return m.Sum(nil)
}

func (p *adminPage) csrfOf(id []byte) string {
	return base64.RawURLEncoding.EncodeToString(p.sign("csrf", id))
}

// cookie returns the session cookie, Secure when the browser reached the
// page over HTTPS: over TLS to this server, or through a proxy that
// terminated TLS and says so (X-Forwarded-Proto or Forwarded proto=https).
// The headers are trusted for this only: Secure restricts where the
// browser sends the cookie, so a forged header can only keep a forger's
// own cookie off plain HTTP.
func (p *adminPage) cookie(r *http.Request, value string, maxAge int) *http.Cookie {
	return &http.Cookie{
		Name: sessionCookie, Value: value, Path: pagePath, MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil || forwardedHTTPS(r.Header),
	}
}

// forwardedHTTPS reports whether the first proxy hop recorded in h, the
// one the browser connected to, says it was reached over HTTPS.
func forwardedHTTPS(h http.Header) bool {
	if v := h.Get("X-Forwarded-Proto"); v != "" {
		first, _, _ := strings.Cut(v, ",")
		return strings.EqualFold(strings.TrimSpace(first), "https")
	}
	first, _, _ := strings.Cut(h.Get("Forwarded"), ",")
	for _, pair := range strings.Split(first, ";") {
		if k, v, ok := strings.Cut(strings.TrimSpace(pair), "="); ok && strings.EqualFold(k, "proto") {
			return strings.EqualFold(strings.Trim(v, `"`), "https")
		}
	}
	return false
}

func (p *adminPage) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	got := sha256.Sum256(bytes.TrimSpace([]byte(r.PostFormValue("token"))))
	if subtle.ConstantTimeCompare(got[:], p.bearer[:]) != 1 {
		p.log.WarnContext(r.Context(), "admin page: sign-in refused: wrong token", "remote", r.RemoteAddr)
		p.render(w, http.StatusUnauthorized, "login.html", pageData{Title: "sign in", Notice: &notice{"error", "Wrong token: refused."}})
		return
	}
	http.SetCookie(w, p.cookie(r, p.newSession(), int(sessionTTL/time.Second)))
	http.Redirect(w, r, pagePath, http.StatusSeeOther)
}

func (p *adminPage) logout(w http.ResponseWriter, r *http.Request, _ session) {
	http.SetCookie(w, p.cookie(r, "", -1))
	http.Redirect(w, r, pagePath, http.StatusSeeOther)
}

func (p *adminPage) style(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "max-age=300")
	http.ServeFileFS(w, r, pageFiles, "templates/style.css")
}

func (p *adminPage) page(w http.ResponseWriter, r *http.Request, s session) {
	p.show(w, r, s, http.StatusOK, nil)
}

// release is the key API's fenced release (operatorRelease), from the
// page's button; the page is drawn again with what happened.
func (p *adminPage) release(w http.ResponseWriter, r *http.Request, s session) {
	key := r.PostFormValue("key")
	tok, err := strconv.ParseUint(r.PostFormValue("token"), 10, 64)
	if err != nil || tok == 0 {
		p.show(w, r, s, http.StatusBadRequest, &notice{"error", "token: want the key's token (a positive integer)."})
		return
	}
	if err := operatorRelease(r.Context(), p.s, p.log, key, tok, "page"); err != nil {
		p.show(w, r, s, adminStatus(err), &notice{"error", err.Error()})
		return
	}
	p.show(w, r, s, http.StatusOK, &notice{"ok", "Released " + key + " (token " + strconv.FormatUint(tok, 10) + "): the next request with this key executes."})
}

type notice struct{ Kind, Text string }

type pageData struct {
	Title     string
	Notice    *notice
	Now       string
	CSRF      string
	Keys      []pageKey
	Next      string
	KeysError string
	Routes    []routeView
}

type pageKey struct {
	Key, Expires, Left string
	Route, Age         string // "" unless this process holds the key
	Token              uint64
	Lapsed             bool
}

// show draws the page: the keys in progress (a page of them, from
// ?after=) and the outcomes per route, under n if not nil.
func (p *adminPage) show(w http.ResponseWriter, r *http.Request, s session, status int, n *notice) {
	now := p.now()
	d := pageData{Title: "operator page", Notice: n, Now: now.UTC().Format(time.RFC3339), CSRF: s.csrf, Routes: p.outcomes.snapshot()}
	in, err := inspector(p.s)
	var keys []keystore.KeyInfo
	if err == nil {
		keys, d.Next, err = in.List(r.Context(), keystore.ListOptions{State: keystore.InProgress, After: r.URL.Query().Get("after"), Limit: pageKeys})
	}
	if err != nil {
		p.log.ErrorContext(r.Context(), "admin page: cannot list keys", "err", err)
		d.KeysError = "Cannot list keys: " + err.Error()
	}
	for _, k := range keys {
		pk := pageKey{Key: k.Key, Token: k.Token, Expires: k.Expires.UTC().Format(time.RFC3339Nano), Lapsed: k.Lapsed(now)}
		if pk.Lapsed {
			pk.Left = "lapsed " + humanDuration(now.Sub(k.Expires)) + " ago: the holder is gone"
		} else {
			pk.Left = humanDuration(k.Expires.Sub(now))
		}
		if p.held != nil {
			if h, ok := p.held.lookup(k.Key, k.Token); ok {
				pk.Route, pk.Age = h.route, humanDuration(now.Sub(h.since))
			}
		}
		d.Keys = append(d.Keys, pk)
	}
	p.render(w, status, "page.html", d)
}

func (p *adminPage) render(w http.ResponseWriter, status int, name string, d pageData) {
	var b bytes.Buffer
	if err := pageTemplates.ExecuteTemplate(&b, name, d); err != nil {
		p.log.Error("admin page: template failed", "template", name, "err", err)
		http.Error(w, "template failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}
