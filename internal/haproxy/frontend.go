package haproxy

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/accesslog"
	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/haproxy/hapword"
)

// routeVar holds the number of the route a request matched, when a
// frontend's routes need it (see routeLines).
const routeVar = "txn.shoal_route"

// frontendLines returns the lines of fe's frontend section.
func frontendLines(cfg *config.Config, fe config.Frontend, p Paths) ([]string, error) {
	if !hapword.Name(fe.Name) {
		return nil, errors.New("name: must be letters, digits, '-', '_', '.' or ':'")
	}
	lines, err := bindLines(cfg.StateDir, fe)
	if err != nil {
		return nil, err
	}
	if fe.MaxConnections > 0 {
		lines = append(lines, "maxconn "+strconv.Itoa(fe.MaxConnections))
	}
	for _, to := range []struct {
		name string
		d    time.Duration
	}{{"client", fe.Timeouts.Client}, {"http-request", fe.Timeouts.HTTPRequest}, {"http-keep-alive", fe.Timeouts.HTTPKeepAlive}} {
		if to.d > maxTimer {
			return nil, fmt.Errorf("timeout %s %s: longer than HAProxy's limit of %s", to.name, to.d, maxTimer)
		}
		if to.d > 0 {
			lines = append(lines, "timeout "+to.name+" "+ms(to.d))
		}
	}
	if fe.Mode == config.ModeTCP {
		// One route, to one group; the access log's format is HTTP's.
		if len(fe.Routes) != 1 || fe.Routes[0].Group == "" || !hapword.Name(fe.Routes[0].Group) {
			return nil, errors.New("a tcp frontend needs one route naming one group")
		}
		return append(lines, "mode tcp", "default_backend "+fe.Routes[0].Group), nil
	}

	// idle-close-on-response keeps reloads hitless for clients that do not
	// retry: by default a worker a reload replaces closes its idle
	// keep-alive connections at once, and a request the client sends as
	// the close is under way gets a read error (on a busy machine, several
	// per reload). With it, the old worker answers the connection's next
	// request with "Connection: close"; idle connections end with timeout
	// http-keep-alive (hardStopAfter outlasts it).
	if fe.ForwardedHeaders {
		// forwardfor is an HTTP frontend's (a tcp one would warn).
		lines = append(lines, "option forwardfor")
	}
	lines = append(lines, "option idle-close-on-response")
	if cfg.HA != nil && cfg.HA.VIP != nil {
		// A step-down drains the node before the VIP moves (Closing).
		lines = append(lines, "http-after-response set-header Connection close if { var("+closingVar+") -m int gt 0 }")
	}
	acmeFirst, acmeUse, err := acmeLines(cfg, fe, p)
	if err != nil {
		return nil, err
	}
	lines = append(lines, acmeFirst...)
	// Before every rule that answers (redirect_http's redirect, a route's
	// redirect or respond), so that a limited client is answered 429
	// whatever it asks for.
	clients, err := clientLines(fe)
	if err != nil {
		return nil, err
	}
	lines = append(lines, clients...)
	limits, err := rateLimitLines(fe)
	if err != nil {
		return nil, err
	}
	lines = append(lines, limits...)
	lines = append(lines, tlsLines(fe)...)
	fwd, err := forwardedLines(fe)
	if err != nil {
		return nil, err
	}
	lines = append(lines, fwd...)
	switch n := cfg.AccessLog.Sample; {
	case !cfg.LogsRequests(): // off, or nothing reads it
	case cfg.AccessLog.Adaptive:
		// Each backend chooses its rate (see sampleLines).
		lines = append(lines, fmt.Sprintf("log unix@%s format raw local0", p.LogSocket), fmt.Sprintf("log-format %q", accesslog.Format))
	case n > 0:
		lines = append(lines, fmt.Sprintf("log unix@%s format raw sample 1:%d local0", p.LogSocket, n), fmt.Sprintf("log-format %q", accesslog.Format))
	}
	if c := fe.Compression; c != nil {
		lines = append(lines, "compression algo gzip")
		for _, t := range c.Types {
			if hapword.MediaType(t) != nil {
				return nil, fmt.Errorf("compression type %q: not a media type such as text/html", t)
			}
		}
		if len(c.Types) > 0 {
			lines = append(lines, "compression type "+strings.Join(c.Types, " "))
		}
	}
	// ACME's challenges reach shoal whatever the routes say.
	lines = append(lines, acmeUse...)
	routes, err := routeLines(fe.Name, fe.Routes)
	if err != nil {
		return nil, err
	}
	return append(lines, routes...), nil
}

// forwardedLines are the rules of fe's forwarded headers (option forwardfor
// appends the client's address after them): X-Forwarded-Proto, and a
// client's own X-Forwarded-For removed, as it would be passed on in front of
// the address forwardfor appends; a trusted proxy's goes on to the instance.
// Without ForwardedHeaders there are none.
func forwardedLines(fe config.Frontend) ([]string, error) {
	if !fe.ForwardedHeaders {
		return nil, nil
	}
	lines := protoLines(fe)
	trusted, err := trustedACL(fe)
	if err != nil {
		return nil, err
	}
	if trusted != "" {
		return append(lines, "http-request del-header X-Forwarded-For unless "+trusted), nil
	}
	return append(lines, "http-request del-header X-Forwarded-For"), nil
}

// bindLines returns fe's bind lines: IPv4 or IPv6 ("[::1]:80"), or every
// address of a family; those that speak TLS load the certificate store's
// crt-list of fe (see tlsBind).
func bindLines(stateDir string, fe config.Frontend) ([]string, error) {
	if len(fe.Bind) == 0 {
		return nil, errors.New("no bind address")
	}
	var lines []string
	for _, b := range fe.Bind {
		addr, err := bindAddress(b)
		if err != nil {
			return nil, err
		}
		if !speaksTLS(fe, b) {
			lines = append(lines, "bind "+addr)
			continue
		}
		opts, err := tlsBind(stateDir, fe)
		if err != nil {
			return nil, err
		}
		lines = append(lines, "bind "+addr+" "+opts)
	}
	if fe.TLS != nil {
		for _, b := range fe.TLS.Bind {
			if !slices.Contains(fe.Bind, b) {
				return nil, fmt.Errorf("tls.bind %q: not one of the frontend's binds", b)
			}
		}
	}
	return lines, nil
}

// routeLines renders routes, first match wins, into ACLs and rules; nothing
// is evaluated in Go. Every route's conditions are named ACLs (route N's
// rN_host, rN_path, ...) that must all hold.
//
// use_backend rules are tried in order, so routes that only pick groups
// are use_backend lines in the routes' order. But HAProxy runs every
// http-request rule (a redirect, a return) before any use_backend: when a
// frontend has such a route, each request first records the number of the
// first route it matches in routeVar, and every action is conditioned on
// that number.
//
// Weights split a route's requests: a random number below the weights' sum,
// drawn once per request, picks the group whose cumulative range holds it.
func routeLines(fe string, routes []config.Route) ([]string, error) {
	var (
		acls, rules, uses []string
		matches           = make([]string, len(routes))
		byNumber          = false
	)
	for _, r := range routes {
		// A route's refusals (see accessRules) are http-request rules too.
		byNumber = byNumber || r.Redirect != nil || r.Respond != nil || r.HasAccess()
	}
	for i, r := range routes {
		n := i + 1
		conds, lines, err := routeACLs(n, r)
		if err != nil {
			return nil, fmt.Errorf("route %d: %w", n, err)
		}
		acls = append(acls, lines...)
		matches[i] = strings.Join(conds, " ")
		if byNumber {
			rules = append(rules, strings.TrimSuffix(fmt.Sprintf("http-request set-var(%s) int(%d) if !shoal_routed %s", routeVar, n, matches[i]), " "))
			matches[i] = fmt.Sprintf("{ var(%s) -m int eq %d }", routeVar, n)
		}
	}
	if byNumber {
		acls = append(acls, fmt.Sprintf("acl shoal_routed var(%s) -m found", routeVar))
	}
	// when is a rule's condition: route i's match and more.
	when := func(i int, more ...string) string {
		c := strings.TrimSpace(matches[i] + " " + strings.Join(more, " "))
		if c == "" {
			return ""
		}
		return " if " + c
	}
	for i, r := range routes {
		access, err := accessRules(fe, i+1, r, matches[i])
		if err != nil {
			return nil, fmt.Errorf("route %d: %w", i+1, err)
		}
		rules = append(rules, access...)
	}
	for i, r := range routes {
		n := i + 1
		switch {
		case r.Redirect != nil:
			l, err := redirectRule(r.Redirect)
			if err != nil {
				return nil, fmt.Errorf("route %d: %w", n, err)
			}
			rules = append(rules, l+when(i))
		case r.Respond != nil:
			l, err := respondRule(r.Respond)
			if err != nil {
				return nil, fmt.Errorf("route %d: %w", n, err)
			}
			rules = append(rules, l+when(i))
		case len(r.Weights) > 0:
			sum := 0
			for _, w := range r.Weights {
				if !hapword.Name(w.Group) || w.Weight < 0 {
					return nil, fmt.Errorf("route %d: weight %d for group %q", n, w.Weight, w.Group)
				}
				sum += w.Weight
			}
			if sum == 0 {
				return nil, fmt.Errorf("route %d: the weights add up to 0", n)
			}
			v := fmt.Sprintf("txn.shoal_w%d", n)
			rules = append(rules, fmt.Sprintf("http-request set-var(%s) rand(%d)", v, sum)+when(i))
			upTo, last := 0, lastWeighted(r.Weights)
			for j, w := range r.Weights {
				if w.Weight == 0 {
					continue
				}
				upTo += w.Weight
				if j == last {
					uses = append(uses, "use_backend "+w.Group+when(i))
					break
				}
				uses = append(uses, "use_backend "+w.Group+when(i, fmt.Sprintf("{ var(%s) -m int lt %d }", v, upTo)))
			}
		default:
			if !hapword.Name(r.Group) {
				return nil, fmt.Errorf("route %d: group %q: must be letters, digits, '-', '_', '.' or ':'", n, r.Group)
			}
			uses = append(uses, "use_backend "+r.Group+when(i))
		}
	}
	// A catch-all group route is the frontend's default backend.
	if k := len(uses) - 1; k >= 0 && !strings.Contains(uses[k], " if ") {
		uses[k] = "default_backend " + strings.TrimPrefix(uses[k], "use_backend ")
	}
	return append(append(acls, rules...), uses...), nil
}

// lastWeighted is the index of the last group with a weight above 0.
func lastWeighted(ws []config.Weight) int {
	for j := len(ws) - 1; j >= 0; j-- {
		if ws[j].Weight > 0 {
			return j
		}
	}
	return -1
}

// routeACLs returns the names of route n's ACLs and the lines defining them.
func routeACLs(n int, r config.Route) (conds, lines []string, err error) {
	name := func(kind string) string { return fmt.Sprintf("r%d_%s", n, kind) }
	if len(r.Host) > 0 {
		var exact, withPort, suffixes []string
		for _, h := range r.Host {
			// A host or *.domain; config.Load has turned internationalized
			// names into punycode.
			if !hapword.Host(strings.TrimPrefix(h, "*.")) {
				return nil, nil, fmt.Errorf("host %q: must be a host name, IP address or *.domain", h)
			}
			if domain, ok := strings.CutPrefix(h, "*"); ok {
				suffixes = append(suffixes, domain)
				continue
			}
			exact, withPort = append(exact, h), append(withPort, h+":")
		}
		// Clients send Host with the port when it is not the scheme's default.
		if len(exact) > 0 {
			lines = append(lines,
				fmt.Sprintf("acl %s hdr(host) -i %s", name("host"), strings.Join(exact, " ")),
				fmt.Sprintf("acl %s hdr_beg(host) -i %s", name("host"), strings.Join(withPort, " ")))
		}
		// *.example.com: any subdomain, matched on the host without its
		// port (wildcards are names, never IPv6 literals with colons).
		if len(suffixes) > 0 {
			lines = append(lines, fmt.Sprintf("acl %s hdr(host),field(1,:) -m end -i %s", name("host"), strings.Join(suffixes, " ")))
		}
		conds = append(conds, name("host"))
	}
	if len(r.PathPrefix) > 0 {
		for _, pp := range r.PathPrefix {
			if hapword.PathPrefix(pp) != nil {
				return nil, nil, fmt.Errorf("path prefix %q: must start with \"/\" and hold no spaces, quotes, '#', '\\' or '?'", pp)
			}
		}
		lines = append(lines, fmt.Sprintf("acl %s path_beg %s", name("path"), strings.Join(r.PathPrefix, " ")))
		conds = append(conds, name("path"))
	}
	if r.PathRegex != "" {
		re, err := hapword.Escape(r.PathRegex)
		if err != nil {
			return nil, nil, fmt.Errorf("path_regex: %w", err)
		}
		lines = append(lines, fmt.Sprintf("acl %s path_reg %s", name("regex"), re))
		conds = append(conds, name("regex"))
	}
	if len(r.Method) > 0 {
		for _, m := range r.Method {
			if hapword.HTTPToken(m) != nil {
				return nil, nil, fmt.Errorf("method %q: must be an HTTP method such as GET", m)
			}
		}
		lines = append(lines, fmt.Sprintf("acl %s method %s", name("method"), strings.Join(r.Method, " ")))
		conds = append(conds, name("method"))
	}
	k := 0
	for _, h := range slices.Sorted(maps.Keys(r.Header)) {
		k++
		if hapword.HTTPToken(h) != nil {
			return nil, nil, fmt.Errorf("header %q: must be a header name", h)
		}
		v, err := hapword.Escape(r.Header[h])
		if err != nil {
			return nil, nil, fmt.Errorf("header %s: %w", h, err)
		}
		// fhdr: the whole value, commas included.
		hn := name("hdr" + strconv.Itoa(k))
		lines = append(lines, fmt.Sprintf("acl %s req.fhdr(%s) -m str %s", hn, h, v))
		conds = append(conds, hn)
	}
	// A redirect to https is for requests that came over plain http: on a
	// TLS bind it would answer a redirect to the very same URL, forever.
	// There the route does not match, and the next one decides.
	if r.Redirect != nil && r.Redirect.HTTPS {
		conds = append(conds, "!{ ssl_fc }")
	}
	return conds, lines, nil
}

// redirectRule is the http-request rule of a redirect route.
func redirectRule(r *config.Redirect) (string, error) {
	if !slices.Contains([]int{301, 302, 303, 307, 308}, r.Code) {
		return "", fmt.Errorf("redirect code %d: must be 301, 302, 303, 307 or 308", r.Code)
	}
	if r.HTTPS {
		return fmt.Sprintf("http-request redirect scheme https code %d", r.Code), nil
	}
	if err := hapword.Location(r.Location); err != nil {
		return "", fmt.Errorf("redirect location: %w", err)
	}
	// The location is a log-format string: a literal '%' is "%%".
	loc, err := hapword.Escape(strings.ReplaceAll(r.Location, "%", "%%"))
	if err != nil {
		return "", fmt.Errorf("redirect location: %w", err)
	}
	return fmt.Sprintf("http-request redirect location %s code %d", loc, r.Code), nil
}

// respondRule is the http-request rule of a respond route: HAProxy answers
// with the body itself (escaped, so that any text is one word).
func respondRule(r *config.Respond) (string, error) {
	if r.Status < 200 || r.Status > 599 {
		return "", fmt.Errorf("respond status %d: must be from 200 to 599", r.Status)
	}
	l := "http-request return status " + strconv.Itoa(r.Status)
	if r.Body == "" {
		return l, nil
	}
	ct, err := hapword.Escape(r.ContentType)
	if err != nil {
		return "", fmt.Errorf("respond content_type: %w", err)
	}
	body, err := hapword.Escape(r.Body)
	if err != nil {
		return "", fmt.Errorf("respond body: %w", err)
	}
	return l + " content-type " + ct + " string " + body, nil
}
