package haproxy

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/shoal-lb/shoal/internal/certstore"
	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/haproxy/hapword"
)

// tlsBind returns what follows a TLS bind's address: the certificates are
// the crt-list the store writes (see certstore), so that certificates change
// through the Runtime API and the configuration text, hence a reload, does
// not. The ciphers are HAProxy's (ssl-default-bind-*) defaults.
func tlsBind(stateDir string, fe config.Frontend) (string, error) {
	t := fe.TLS
	ver, ok := config.HAProxyTLSVersion(t.MinVersion)
	if !ok {
		return "", fmt.Errorf("tls.min_version %q: must be 1.2 or 1.3", t.MinVersion)
	}
	if len(t.ALPN) == 0 {
		return "", errors.New("tls.alpn: empty")
	}
	for _, p := range t.ALPN {
		if p != "h2" && p != "http/1.1" {
			return "", fmt.Errorf("tls.alpn %q: must be h2 or http/1.1", p)
		}
	}
	list := certstore.CrtList(stateDir, fe.Name)
	if hapword.FilePath(list) != nil {
		return "", fmt.Errorf("crt-list path %q: must not contain spaces, control characters, quotes, '#', '\\' or ','", list)
	}
	opts := []string{"ssl", "crt-list", list}
	// A tcp frontend passes the bytes on: offering h2 there would promise
	// what the instance may not speak.
	if fe.Mode != config.ModeTCP {
		opts = append(opts, "alpn", strings.Join(t.ALPN, ","))
	}
	opts = append(opts, "ssl-min-ver", ver)
	switch t.TicketKeys {
	case config.TicketKeysRotate:
		opts = append(opts, "tls-ticket-keys", certstore.TicketKeys(stateDir, fe.Name))
	case config.TicketKeysOff:
		opts = append(opts, "no-tls-tickets")
	default:
		return "", fmt.Errorf("tls.ticket_keys %q: must be rotate or off", t.TicketKeys)
	}
	return strings.Join(opts, " "), nil
}

// speaksTLS reports whether fe's bind address addr terminates TLS: every
// bind of a TLS frontend, or those its tls.bind lists.
func speaksTLS(fe config.Frontend, addr string) bool {
	return fe.TLS != nil && (len(fe.TLS.Bind) == 0 || slices.Contains(fe.TLS.Bind, addr))
}

// tlsLines are the lines a TLS frontend adds to its section: the scheme the
// instances see, and redirect_http's redirect of the plain binds (but ACME's
// challenges, which must be answered over http). A frontend whose binds all
// speak TLS, or none, sets the scheme with one unconditional rule: every
// request runs the frontend's rules, and the TLS benchmark compares shoal
// with a configuration that has none.
func tlsLines(fe config.Frontend) []string {
	plain := 0
	for _, b := range fe.Bind {
		if !speaksTLS(fe, b) {
			plain++
		}
	}
	switch plain {
	case len(fe.Bind):
		return []string{"http-request set-header X-Forwarded-Proto http"}
	case 0:
		return []string{"http-request set-header X-Forwarded-Proto https"}
	}
	lines := []string{
		"http-request set-header X-Forwarded-Proto https if { ssl_fc }",
		"http-request set-header X-Forwarded-Proto http if !{ ssl_fc }",
	}
	if fe.TLS.RedirectHTTP {
		lines = append(lines, "http-request redirect scheme https code 301 if !{ ssl_fc } !{ path_beg "+acmeChallenge+" }")
	}
	return lines
}
