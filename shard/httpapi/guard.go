package httpapi

import (
	"net"
	"net/http"
	"net/url"
	"strings"

	"go.uber.org/zap"
)

// Guard refuses, for the API and the console alike, the requests a web
// page in the operator's browser could make against this server:
//
//   - DNS rebinding: a page on an attacker's name that resolves to this
//     server's address reaches it with the attacker's name in Host. A
//     request is served only when Host is an IP address, localhost (or a
//     name under .localhost), or a name in allowed. An IP address in Host
//     is safe: a rebinding page can only send its own name. allowed "*"
//     turns the check off (a balancer that forwards any Host).
//   - Cross-site requests: a POST, PUT, PATCH or DELETE whose Origin is
//     not this server (its host and port are not the request's Host nor
//     an allowed name) or whose Sec-Fetch-Site is cross-site or same-site
//     is refused. Clients that are not browsers send neither header and
//     pass. (The scheme is not compared: a balancer may end TLS.)
//
// Both hold in every mode, with or without tokens: without tokens, every
// local caller is an admin, so they are all that keeps a page out.
func Guard(allowed []string, log *zap.Logger, next http.Handler) http.Handler {
	anyHost := false
	names := map[string]bool{}
	for _, a := range allowed {
		a = strings.ToLower(strings.TrimSpace(a))
		switch {
		case a == "*":
			anyHost = true
		case a != "":
			names[hostOnly(a)] = true
		}
	}
	if log == nil {
		log = zap.NewNop()
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := hostOnly(strings.ToLower(r.Host))
		if !anyHost && !names[host] && net.ParseIP(host) == nil && host != "localhost" && !strings.HasSuffix(host, ".localhost") {
			log.Warn("request refused: Host is not this server's", zap.String("host", r.Host), zap.String("path", r.URL.Path))
			problem(w, http.StatusMisdirectedRequest, "unknown host",
				"Host "+r.Host+" is not a name this server answers to (DELAYQ_HTTP_ALLOWED_HOSTS)", "Host")
			return
		}
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
		default:
			if site := r.Header.Get("Sec-Fetch-Site"); site == "cross-site" || site == "same-site" {
				refuseCrossSite(w, r, log, "Sec-Fetch-Site: "+site)
				return
			}
			if o := r.Header.Get("Origin"); o != "" && !anyHost && !sameOrigin(o, r, names) {
				refuseCrossSite(w, r, log, "Origin: "+o)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func refuseCrossSite(w http.ResponseWriter, r *http.Request, log *zap.Logger, why string) {
	log.Warn("request refused: sent by another site's page", zap.String("why", why), zap.String("method", r.Method),
		zap.String("path", r.URL.Path))
	problem(w, http.StatusForbidden, "cross-site request", why+" is not this server: a page elsewhere cannot change anything here", "Origin")
}

// sameOrigin reports whether origin names the server r was sent to: its
// host and port are r's Host, or its host is one of names.
func sameOrigin(origin string, r *http.Request, names map[string]bool) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false // "null" (a sandboxed or file page), or garbage
	}
	return strings.EqualFold(u.Host, r.Host) || names[strings.ToLower(u.Hostname())]
}

// hostOnly strips the port of a Host header value (and an IPv6 address's
// brackets).
func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")
}
