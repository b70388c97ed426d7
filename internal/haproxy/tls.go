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

// protoLines set X-Forwarded-Proto: the scheme the instances see. A
// frontend whose binds all speak TLS, or none, sets it with one
// unconditional rule: every request runs the frontend's rules, and the
// benchmarks compare shoal with a configuration that has none.
func protoLines(fe config.Frontend) []string {
	switch plain := plainBinds(fe); plain {
	case len(fe.Bind):
		return []string{"http-request set-header X-Forwarded-Proto http"}
	case 0:
		return []string{"http-request set-header X-Forwarded-Proto https"}
	}
	return []string{
		"http-request set-header X-Forwarded-Proto https if { ssl_fc }",
		"http-request set-header X-Forwarded-Proto http if !{ ssl_fc }",
	}
}

// tlsLines are the lines a TLS frontend adds to its section:
// redirect_http's redirect of the plain binds (but ACME's challenges, which
// must be answered over http).
func tlsLines(fe config.Frontend) []string {
	if p := plainBinds(fe); p == 0 || p == len(fe.Bind) || !fe.TLS.RedirectHTTP {
		return nil
	}
	return []string{"http-request redirect scheme https code 301 if !{ ssl_fc } !{ path_beg " + acmeChallenge + " }"}
}

// plainBinds counts fe's binds that do not speak TLS.
func plainBinds(fe config.Frontend) int {
	plain := 0
	for _, b := range fe.Bind {
		if !speaksTLS(fe, b) {
			plain++
		}
	}
	return plain
}
