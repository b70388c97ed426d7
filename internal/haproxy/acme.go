package haproxy

import (
	"fmt"
	"path/filepath"

	"github.com/shoal-lb/shoal/internal/config"
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

// acmeChallengeFirst and acmeChallengeUse route a frontend's challenges to
// shoal whatever its routes, redirects or limits say (a frontend with TLS
// from ACME). HAProxy runs every http-request rule before any use_backend,
// so a catch-all respond route, a redirect or a rate limit's deny would
// answer a challenge itself: "http-request allow", before every rule that
// answers, ends the frontend's http-request rules for it; then use_backend,
// before any group's, sends it to shoal_acme.
func acmeChallengeFirst(fe config.Frontend) []string {
	if !frontendHasACME(fe) {
		return nil
	}
	return []string{"http-request allow if { path_beg " + acmeChallenge + " }"}
}

func acmeChallengeUse(fe config.Frontend) []string {
	if !frontendHasACME(fe) {
		return nil
	}
	return []string{fmt.Sprintf("use_backend %s if { path_beg %s }", acmeBackend, acmeChallenge)}
}

func frontendHasACME(fe config.Frontend) bool {
	return fe.Mode != config.ModeTCP && fe.TLS != nil && fe.TLS.ACME != nil
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
	// p.Dir is checked by checkPaths: one word, no quotes.
	return []string{
		"backend " + acmeBackend,
		"    mode http",
		"    no log",
		"    server shoal " + sock,
	}, nil
}

func hasACME(cfg *config.Config) bool {
	for _, fe := range cfg.Frontends {
		if frontendHasACME(fe) {
			return true
		}
	}
	return false
}
