package main

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// trustedProxies are the peers whose forwarding headers idem serve keeps
// and extends; from any other peer they are dropped and replaced.
type trustedProxies []netip.Prefix

// parseTrustedProxies reads --trusted-proxies: CIDRs or bare addresses,
// comma-separated.
func parseTrustedProxies(s string) (trustedProxies, error) {
	var t trustedProxies
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		if !strings.Contains(f, "/") {
			a, err := netip.ParseAddr(f)
			if err != nil {
				return nil, fmt.Errorf("%w --trusted-proxies %q: %v", errFlag, f, err)
			}
			t = append(t, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("%w --trusted-proxies %q: %v", errFlag, f, err)
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		t = append(t, p.Masked())
	}
	return t, nil
}

func (t trustedProxies) trusts(a netip.Addr) bool {
	for _, p := range t {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// peerAddr is the address of the connection's other end.
func peerAddr(r *http.Request) (netip.Addr, bool) {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			return netip.Addr{}, false
		}
		a, err := netip.ParseAddr(host)
		return a.Unmap(), err == nil
	}
	return ap.Addr().Unmap(), true
}

// set writes the upstream request's forwarding headers (out has none of the
// client's). From a trusted peer, the client's X-Forwarded-For and
// Forwarded chains are kept and this hop appended, and its
// X-Forwarded-Host and -Proto (which describe the original request) kept;
// from any other peer the client's are dropped and these describe this
// connection alone.
func (t trustedProxies) set(in *http.Request, out http.Header) {
	peer, ok := peerAddr(in)
	proto := "http"
	if in.TLS != nil {
		proto = "https"
	}
	forOf := "unknown"
	if ok {
		forOf = peer.String()
	}
	trusted := ok && t.trusts(peer)
	xff, xfh, xfp, fwd := forOf, in.Host, proto, ""
	if trusted {
		if prior := strings.Join(in.Header.Values("X-Forwarded-For"), ", "); prior != "" {
			xff = prior + ", " + forOf
		}
		if h := in.Header.Get("X-Forwarded-Host"); h != "" {
			xfh = h
		}
		if p := in.Header.Get("X-Forwarded-Proto"); p != "" {
			xfp = p
		}
		fwd = strings.Join(in.Header.Values("Forwarded"), ", ")
	}
	out.Set("X-Forwarded-For", xff)
	if xfh != "" {
		out.Set("X-Forwarded-Host", xfh)
	}
	out.Set("X-Forwarded-Proto", xfp)
	// RFC 7239: this hop's element, appended to a trusted chain.
	node := forOf
	if ok && peer.Is6() {
		node = "[" + peer.String() + "]"
	}
	el := "for=" + fwdValue(node)
	if in.Host != "" {
		el += ";host=" + fwdValue(in.Host)
	}
	el += ";proto=" + proto
	if fwd != "" {
		el = fwd + ", " + el
	}
	out.Set("Forwarded", el)
}

// fwdValue is v as an RFC 7239 value: a token, else a quoted string.
func fwdValue(v string) string {
	token := v != ""
	for _, c := range v {
		if c > 126 || c <= 32 || strings.ContainsRune("\"(),/:;<=>?@[\\]{}", c) {
			token = false
			break
		}
	}
	if token {
		return v
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(v) + `"`
}
