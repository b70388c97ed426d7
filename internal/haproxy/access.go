package haproxy

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/haproxy/hapword"
)

// Access control on routes (config.Route's allow, deny and basic_auth),
// evaluated by HAProxy: a refused request is answered 403 or 401 before its
// route's action, so it never reaches an instance.
//
// The client an allow or deny list sees is clientVar: the connection's
// source, unless that is one of the frontend's trusted proxies; then the
// X-Forwarded-For hops are read from the right, each one taken while the
// previous was trusted (at most maxHops), so the first untrusted hop
// decides. A client that is not a trusted proxy cannot change its address
// with a forged header. A hop that is not an address ends the walk (the
// last trusted hop then stands for the client).
const (
	clientVar = "txn.shoal_client"
	authedVar = "txn.shoal_authed"
	maxHops   = 8
	// accessTable counts each route's refusals: key "FRONTEND/N" (route N,
	// from 1), gpc0 the 403s, gpc1 the 401s. It is a section of its own,
	// named with a dot, which no group or frontend name may hold.
	accessTable = "shoal.access"
	// accessTableSize bounds the table: one entry a route.
	accessTableSize = 100_000
	// accessKeyLen fits a frontend's name (32 at most), '/' and a number.
	accessKeyLen = 48
)

// needsAccess reports whether any of fe's routes limits who may use it.
func needsAccess(fe config.Frontend) bool {
	return slices.ContainsFunc(fe.Routes, config.Route.HasAccess)
}

// rateByClient reports whether fe's rate limit tracks clientVar rather
// than the connection's source: a limit by address behind trusted proxies,
// which would otherwise count every client of a proxy as one.
func rateByClient(fe config.Frontend) bool {
	return fe.RateLimit != nil && len(fe.TrustedProxies) > 0 && !strings.HasPrefix(fe.RateLimit.By, config.RateLimitByHeader)
}

// clientLines set clientVar for fe (see above); nil when neither a route
// nor the rate limit of fe needs it. They go before X-Forwarded-For is
// removed and before the rate limit tracks the client.
func clientLines(fe config.Frontend) ([]string, error) {
	if !needsAccess(fe) && !rateByClient(fe) {
		return nil, nil
	}
	lines := []string{"http-request set-var(" + clientVar + ") src"}
	if len(fe.TrustedProxies) == 0 {
		return lines, nil
	}
	trusted, err := cidrWords(fe.TrustedProxies)
	if err != nil {
		return nil, fmt.Errorf("trusted_proxies: %w", err)
	}
	for k := 1; k <= maxHops; k++ {
		hop := fmt.Sprintf("req.hdr_ip(X-Forwarded-For,-%d)", k)
		lines = append(lines, fmt.Sprintf("http-request set-var(%s) %s if { var(%s) -m ip %s } { %s -m found }", clientVar, hop, clientVar, trusted, hop))
	}
	return lines, nil
}

// trustedACL is the ACL of requests from fe's trusted proxies, whose
// X-Forwarded-For is passed on; empty when fe trusts none.
func trustedACL(fe config.Frontend) (string, error) {
	if len(fe.TrustedProxies) == 0 {
		return "", nil
	}
	trusted, err := cidrWords(fe.TrustedProxies)
	if err != nil {
		return "", fmt.Errorf("trusted_proxies: %w", err)
	}
	return "{ src " + trusted + " }", nil
}

// accessRules are route n's refusals, conditioned on match (the route was
// the one matched): each counted in accessTable, then answered.
func accessRules(fe string, n int, r config.Route, match string) ([]string, error) {
	if !r.HasAccess() {
		return nil, nil
	}
	key := fe + "/" + strconv.Itoa(n)
	lines := []string{fmt.Sprintf("http-request track-sc%d str(%s) table %s if %s", accessCounter, key, accessTable, match)}
	refuse := func(cond string) {
		lines = append(lines,
			fmt.Sprintf("http-request sc-inc-gpc0(%d) if %s %s", accessCounter, match, cond),
			fmt.Sprintf("http-request deny deny_status 403 if %s %s", match, cond))
	}
	if len(r.Allow) > 0 {
		w, err := cidrWords(r.Allow)
		if err != nil {
			return nil, fmt.Errorf("allow: %w", err)
		}
		refuse(fmt.Sprintf("!{ var(%s) -m ip %s }", clientVar, w))
	}
	if len(r.Deny) > 0 {
		w, err := cidrWords(r.Deny)
		if err != nil {
			return nil, fmt.Errorf("deny: %w", err)
		}
		refuse(fmt.Sprintf("{ var(%s) -m ip %s }", clientVar, w))
	}
	if r.BasicAuth != nil {
		// The password is hashed once a request (http_auth runs crypt).
		unauthed := fmt.Sprintf("!{ var(%s) -m bool }", authedVar)
		lines = append(lines,
			fmt.Sprintf("http-request set-var(%s) bool(true) if %s { http_auth(%s) }", authedVar, match, userlistName(fe, n)),
			fmt.Sprintf("http-request sc-inc-gpc1(%d) if %s %s", accessCounter, match, unauthed),
			fmt.Sprintf("http-request auth realm shoal if %s %s", match, unauthed))
	}
	return lines, nil
}

// userlistName is the userlist of route n of frontend fe.
func userlistName(fe string, n int) string { return fmt.Sprintf("shoal.auth.%s.%d", fe, n) }

// hashRE is what a password hash in a userlist may hold (crypt's
// alphabet): one word of haproxy.cfg with nothing HAProxy would expand.
var hashRE = regexp.MustCompile(`^\$[0-9a-z]+\$[$./A-Za-z0-9=]+$`)

// accessSections are the userlists of cfg's routes with basic_auth and
// the table counting refusals; nil when no route limits access.
func accessSections(cfg *config.Config) ([]string, error) {
	var lines []string
	any := false
	for _, fe := range cfg.Frontends {
		any = any || needsAccess(fe)
		for i, r := range fe.Routes {
			if r.BasicAuth == nil {
				continue
			}
			if len(r.BasicAuth.Users) == 0 {
				return nil, fmt.Errorf("frontend %s route %d: basic_auth has no user", fe.Name, i+1)
			}
			lines = append(lines, "", "userlist "+userlistName(fe.Name, i+1))
			for _, u := range r.BasicAuth.Users {
				// Never the hash in an error: it would be logged.
				if !hapword.Name(u.Name) || strings.Contains(u.Name, ":") {
					return nil, fmt.Errorf("frontend %s route %d: user name %q", fe.Name, i+1, u.Name)
				}
				if !hashRE.MatchString(u.Hash) {
					return nil, fmt.Errorf("frontend %s route %d: user %s: the password hash is not a crypt hash", fe.Name, i+1, u.Name)
				}
				lines = append(lines, "    user "+u.Name+" password "+u.Hash)
			}
		}
	}
	if !any {
		return nil, nil
	}
	return append(lines, "", "backend "+accessTable,
		fmt.Sprintf("    stick-table type string len %d size %d store gpc0,gpc1", accessKeyLen, accessTableSize)), nil
}

// cidrWords renders networks as HAProxy ACL patterns, refusing any that
// config.ParseCIDR would not accept.
func cidrWords(cidrs []string) (string, error) {
	for _, c := range cidrs {
		if _, err := config.ParseCIDR(c); err != nil {
			return "", err
		}
	}
	return strings.Join(cidrs, " "), nil
}

// Denials are one route's refused requests since HAProxy's last reload.
type Denials struct {
	Frontend string
	// Route is the route's number in its frontend, from 1.
	Route        int
	Forbidden    int64 // answered 403 (allow, deny)
	Unauthorized int64 // answered 401 (basic_auth)
}

// Denials reads the refusals of every route with access control.
func (m *Manager) Denials(ctx context.Context) ([]Denials, error) {
	m.mu.Lock()
	up := m.up
	m.mu.Unlock()
	if !up {
		return nil, fmt.Errorf("route denials: %w", ErrNotRunning)
	}
	if !slices.ContainsFunc(m.config().Frontends, needsAccess) {
		return nil, nil
	}
	cctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	m.reloadMu.RLock()
	out, err := m.client.Exec(cctx, "show table "+accessTable)
	m.reloadMu.RUnlock()
	if err != nil {
		return nil, err
	}
	return parseDenials(out)
}

// parseDenials parses "show table shoal.access":
//
//	# table: shoal.access, type: string, size:100000, used:1
//	0x55d1c6b0e4a0: key=edge/1 use=0 exp=0 gpc0=5 gpc1=2
func parseDenials(out string) ([]Denials, error) {
	var ds []Denials
	for line := range strings.Lines(out) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "# table:") {
			continue
		}
		_, rest, ok := strings.Cut(line, ": key=")
		if !ok || !strings.HasPrefix(line, "0x") {
			return nil, fmt.Errorf("show table %s: %s", accessTable, firstLine(out))
		}
		var d Denials
		for i, f := range strings.Fields(rest) {
			if i == 0 {
				fe, n, _ := strings.Cut(f, "/")
				d.Frontend = fe
				d.Route, _ = strconv.Atoi(n)
				continue
			}
			name, val, _ := strings.Cut(f, "=")
			v, err := strconv.ParseInt(val, 10, 64)
			switch {
			case err != nil:
			case name == "gpc0":
				d.Forbidden = v
			case name == "gpc1":
				d.Unauthorized = v
			}
		}
		ds = append(ds, d)
	}
	slices.SortFunc(ds, func(a, b Denials) int {
		if c := strings.Compare(a.Frontend, b.Frontend); c != 0 {
			return c
		}
		return a.Route - b.Route
	})
	return ds, nil
}
