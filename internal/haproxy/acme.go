package haproxy

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/haproxy/hapword"
)

// acmeBackend is the backend that reaches shoal's ACME challenge handler.
const acmeBackend = "shoal_acme"

// acmeChallenge is the path HTTP-01 challenges ask for on port 80: a
// redirect to https must leave it alone.
const acmeChallenge = "/.well-known/acme-challenge/"

// ACMESocket is the unix socket shoal answers HTTP-01 challenges on: the
// one server of the shoal_acme backend. A socket in the state directory
// (0600) needs no port and nothing else can reach it.
func ACMESocket(p Paths) string { return filepath.Join(p.Dir, "acme.sock") }

// Limits of the challenges that reach shoal. A CA fetches each token once
// from each of a few vantage points, and again after a redirect to https;
// HTTP-01 needs a handful of requests per domain. Beyond these HAProxy
// answers 429 itself, and the CA retries or the certificate is asked for
// again after a back-off.
const (
	// acmeWindow is the per-source limit's period.
	acmeWindow = "10s"
	// acmePerSource and acmePerSourceEach: a client's challenges per
	// acmeWindow, plus this many per domain.
	acmePerSource, acmePerSourceEach = 20, 4
	// acmeTotalTimes: the challenges per second that reach shoal from
	// every client together are this many times one client's limit, so
	// that no one client can use up the cap and keep the CA out.
	acmeTotalTimes = 2
	// acmeMaxConn bounds the challenge requests shoal serves at once; more
	// wait in HAProxy's queue.
	acmeMaxConn = 8
)

// acmeLines route the CA's HTTP-01 challenges for the tls.acme domains of
// any frontend to shoal, on every bind of every http frontend (the CA asks
// on port 80, whichever frontend binds it, and follows redirects to
// https), whatever the routes, redirects or the frontend's own rate limit
// say, within the challenges' own limits. HAProxy runs every http-request
// rule before any use_backend, so a catch-all respond route, a redirect or
// a rate limit's deny would answer a challenge itself: "http-request
// allow", before every rule that answers, ends the frontend's http-request
// rules for it, after the challenges' limits (sticky counter 1: the
// frontend's rate limit has 0) and once HAProxy has answered the tokens
// shoal does not have (404). first are those rules; use, before any
// group's use_backend, sends the challenge to shoal_acme. A challenge for
// another host is an ordinary request, routed like any other.
func acmeLines(cfg *config.Config, fe config.Frontend, p Paths) (first, use []string, err error) {
	domains := acmeDomains(cfg)
	if fe.Mode == config.ModeTCP || len(domains) == 0 {
		return nil, nil, nil
	}
	for _, d := range domains {
		if !hapword.Host(d) || strings.Contains(d, ":") {
			return nil, nil, fmt.Errorf("tls.acme domain %q: must be a DNS name", d)
		}
	}
	perSource := acmePerSource + acmePerSourceEach*len(domains)
	// Both ACLs: lines of one ACL's name would be alternatives.
	const is = "shoal_acme_path shoal_acme_host"
	first = []string{
		"acl shoal_acme_path path_beg " + acmeChallenge,
		// The Host without the port a client may add.
		"acl shoal_acme_host hdr(host),field(1,:) -i " + strings.Join(domains, " "),
		// The tokens shoal has now (SetChallenge keeps the list).
		"acl shoal_acme_token path -f " + p.ACMETokens,
		"http-request track-sc1 src table " + acmeBackend + " if " + is,
		fmt.Sprintf("http-request deny deny_status 429 if %s { sc_http_req_rate(1) gt %d }", is, perSource),
		// Any other token is answered here: guessing never reaches shoal,
		// nor uses up the cap below that the CA's fetches need.
		"http-request return status 404 content-type text/plain string \"no such challenge\\n\" if " + is + " !shoal_acme_token",
		fmt.Sprintf("http-request deny deny_status 429 if %s { be_sess_rate(%s) gt %d }", is, acmeBackend, acmeTotalTimes*perSource),
		"http-request allow if " + is,
	}
	return first, []string{"use_backend " + acmeBackend + " if " + is}, nil
}

// acmeBackendSection is the shoal_acme backend, when a frontend has ACME.
func acmeBackendSection(cfg *config.Config, p Paths) ([]string, error) {
	if !hasACME(cfg) {
		return nil, nil
	}
	for _, g := range cfg.Groups {
		if g.Name == acmeBackend {
			return nil, fmt.Errorf("group name %q: taken by the backend of tls.acme's challenges", g.Name)
		}
	}
	sock := ACMESocket(p)
	if len(sock) > maxSocketPath {
		return nil, fmt.Errorf("haproxy socket path %q: longer than HAProxy's limit of %d bytes; use a shorter state_dir", sock, maxSocketPath)
	}
	// p.Dir is checked by checkPaths: one word, no quotes. The table
	// counts each client's challenges (see acmeLines).
	return []string{
		"backend " + acmeBackend,
		"    mode http",
		"    no log",
		"    stick-table type ipv6 size " + rateTableSize + " expire " + acmeWindow + " store http_req_rate(" + acmeWindow + ")",
		fmt.Sprintf("    server shoal %s maxconn %d", sock, acmeMaxConn),
	}, nil
}

func hasACME(cfg *config.Config) bool { return len(acmeDomains(cfg)) > 0 }

// acmeDomains are the domains of every frontend's tls.acme, lower case,
// each once: a tcp frontend's too, whose challenges an http frontend on
// port 80 answers.
func acmeDomains(cfg *config.Config) []string {
	var ds []string
	for _, fe := range cfg.Frontends {
		if fe.TLS == nil || fe.TLS.ACME == nil {
			continue
		}
		for _, d := range fe.TLS.ACME.Domains {
			if d = strings.ToLower(d); !slices.Contains(ds, d) {
				ds = append(ds, d)
			}
		}
	}
	return ds
}

// SetChallenge adds an HTTP-01 token whose challenge shoal answers now
// (pending), or removes it: HAProxy answers the challenges of every other
// token itself (see acmeLines). The list is written to Paths.ACMETokens,
// which every start and reload of HAProxy reads, and changed in the running
// HAProxy through the runtime API.
func (m *Manager) SetChallenge(ctx context.Context, token string, pending bool) error {
	if !isACMEToken(token) {
		return fmt.Errorf("acme token %q: must be 1 to %d letters, digits, '-' or '_'", token, maxToken)
	}
	m.tokenMu.Lock()
	defer m.tokenMu.Unlock()
	if pending {
		m.tokens[token] = true
	} else {
		delete(m.tokens, token)
	}
	if err := m.writeTokens(); err != nil {
		return err
	}
	m.mu.Lock()
	up := m.up
	m.mu.Unlock()
	if !up {
		return nil // a start reads the file
	}
	cmd := "del acl " + m.paths.ACMETokens + " " + acmeChallenge + token
	if pending {
		cmd = "add acl " + m.paths.ACMETokens + " " + acmeChallenge + token
	}
	cctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	out, err := m.Runtime(cctx, cmd, "")
	// A reload since the file was written may have loaded it already.
	if out = strings.TrimSpace(out); err == nil && out != "" && !(out == "Key not found." && !pending) {
		err = errors.New(out)
	}
	if err != nil {
		return fmt.Errorf("haproxy %q: %w", cmd, err)
	}
	return nil
}

// writeTokens writes the pending tokens' paths to Paths.ACMETokens;
// tokenMu is held.
func (m *Manager) writeTokens() error {
	var b strings.Builder
	for _, t := range slices.Sorted(maps.Keys(m.tokens)) {
		b.WriteString(acmeChallenge + t + "\n")
	}
	if err := writeFileAtomic(m.paths.ACMETokens, []byte(b.String())); err != nil {
		return fmt.Errorf("write acme token list: %w", err)
	}
	return nil
}

// maxToken bounds a token; ACME's are 43 characters (RFC 8555: at least
// 128 bits, base64url).
const maxToken = 256

// isACMEToken accepts a base64url token, which is one word of HAProxy's
// runtime API and of a path.
func isACMEToken(s string) bool {
	if len(s) == 0 || len(s) > maxToken {
		return false
	}
	for _, r := range s {
		if !hapword.IsAlnum(r) && r != '-' && r != '_' {
			return false
		}
	}
	return true
}
