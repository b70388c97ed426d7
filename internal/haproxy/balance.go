package haproxy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/haproxy/hapword"
)

// balanceLines returns a backend's lines for how g spreads requests: its
// algorithm and, for sticky sessions, the cookie HAProxy inserts.
//
// Every algorithm here accepts servers added at runtime (measured on 2.6.12:
// uri, source and hdr() with "hash-type consistent" do; map-based hashing
// does not). Consistent hashing also moves only the keys of an instance that
// comes or goes.
//
// HAProxy 2.6 refuses "cookie VALUE" on "add server", so each server's value
// is a dynamic cookie: a hash of the server's address and port and the
// backend's key, the same value for the same instance after a reload or a
// restart. A server added at runtime gets its value only when "enable
// dynamic-cookie backend" runs again (see stickyCommand). A draining server
// keeps taking the requests that carry its cookie; once in maintenance it
// is skipped, and option redispatch (defaultsLines) sends its clients
// elsewhere with a new cookie.
func balanceLines(g config.Group) ([]string, error) {
	var lines []string
	switch g.Balance {
	case "roundrobin", "leastconn", "first":
		lines = append(lines, "balance "+g.Balance)
	case config.BalanceHash:
		algo, err := hashAlgorithm(g.HashOn)
		if err != nil {
			return nil, err
		}
		lines = append(lines, "balance "+algo, "hash-type consistent")
	default:
		return nil, fmt.Errorf("balance %q: must be roundrobin, leastconn, first or hash (the algorithms that allow servers added at runtime)", g.Balance)
	}
	if s := g.Sticky; s != nil {
		if err := hapword.HTTPToken(s.Cookie); err != nil {
			return nil, fmt.Errorf("sticky cookie: %w", err)
		}
		// indirect: the instance never sees the cookie; nocache: shared
		// caches must not store a response that sets it.
		lines = append(lines, "cookie "+s.Cookie+" insert indirect nocache dynamic",
			"dynamic-cookie-key "+cookieKey(g.Name))
	}
	return lines, nil
}

// hashAlgorithm turns hash_on into HAProxy's balance algorithm.
func hashAlgorithm(on string) (string, error) {
	if err := config.CheckHashOn(on); err != nil {
		return "", fmt.Errorf("hash_on: %w", err)
	}
	if name, ok := strings.CutPrefix(on, config.HashOnHeader); ok {
		return "hdr(" + name + ")", nil
	}
	return on, nil // uri, source
}

// cookieKey is a backend's dynamic-cookie-key. It is derived from the group's
// name so that a restart keeps every client's cookie valid; the values only
// have to tell the group's servers apart.
func cookieKey(group string) string {
	sum := sha256.Sum256([]byte("shoal sticky cookie " + group))
	return hex.EncodeToString(sum[:16])
}

// stickyCommand is what gives the servers of a sticky group added at
// runtime their cookie values (HAProxy recomputes every server's); empty for
// other groups.
func stickyCommand(g config.Group) string {
	if g.Sticky == nil {
		return ""
	}
	return "; enable dynamic-cookie backend " + g.Name
}

// protoArgs returns the "add server" keywords for how HAProxy speaks to the
// instances: nothing for HTTP/1.1, "proto h2" for HTTP/2 without TLS.
func protoArgs(proto string) (string, error) {
	switch proto {
	case "", config.ProtoH1:
		return "", nil
	case config.ProtoH2:
		return " proto h2", nil
	}
	return "", fmt.Errorf("proto %q: must be h1 or h2", proto)
}
