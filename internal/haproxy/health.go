package haproxy

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/haproxy/hapword"
)

// checkLines returns a backend's health check lines for h, as the config
// package loaded it: defaults filled in (config.DefaultHealth) and checked.
// Strings that may hold anything (body, regex) are escaped, byte strings (tcp
// send and expect) are hex, and everything else is refused unless it is a
// plain word: nothing in h can change the configuration's structure.
func checkLines(h config.Health) ([]string, error) {
	var lines []string
	switch h.Type {
	case "http":
		if !hapword.Method(h.Method) {
			return nil, fmt.Errorf("health method %q: must be an HTTP method such as GET", h.Method)
		}
		if hapword.URI(h.Path) != nil {
			return nil, fmt.Errorf("health path %q: must start with \"/\" and hold no spaces, quotes, '#' or '\\'", h.Path)
		}
		if !hapword.Host(h.Host) {
			return nil, fmt.Errorf("health host %q: must be a host name or IP address", h.Host)
		}
		if len(h.Status) == 0 {
			return nil, errors.New("health status: no status codes to accept")
		}
		lines = append(lines, "option httpchk",
			"http-check send meth "+h.Method+" uri "+h.Path+" ver HTTP/1.1 hdr Host "+h.Host,
			"http-check expect status "+statusList(h.Status))
		// Each expect rule must pass, in order, on the same response.
		if h.Body != "" {
			b, err := hapword.Escape(h.Body)
			if err != nil {
				return nil, fmt.Errorf("health body: %w", err)
			}
			lines = append(lines, "http-check expect string "+b)
		}
		if h.BodyRegex != "" {
			re, err := hapword.Escape(h.BodyRegex)
			if err != nil {
				return nil, fmt.Errorf("health body_regex: %w", err)
			}
			lines = append(lines, "http-check expect rstring "+re)
		}
	case "tcp":
		// Without send or expect, "check" alone is a connect (layer 4) check.
		if h.Send != "" || h.Expect != "" {
			lines = append(lines, "option tcp-check", "tcp-check connect")
			if h.Send != "" {
				lines = append(lines, "tcp-check send-binary "+hex.EncodeToString([]byte(h.Send)))
			}
			if h.Expect != "" {
				lines = append(lines, "tcp-check expect binary "+hex.EncodeToString([]byte(h.Expect)))
			}
		}
	default:
		return nil, fmt.Errorf("health type %q: must be http or tcp", h.Type)
	}
	if h.Timeout > 0 {
		lines = append(lines, "timeout check "+ms(h.Timeout))
	}
	return lines, nil
}

// statusList renders accepted status codes as HAProxy's comma-separated list
// of codes and ranges.
func statusList(rs []config.StatusRange) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = r.String()
	}
	return strings.Join(parts, ",")
}

// serverCheckArgs returns the check keywords of an "add server" line. Dynamic
// servers take nothing from default-server, so every setting is here.
func serverCheckArgs(h config.Health) (string, error) {
	if h.Interval < 0 || h.FastInter < 0 || h.DownInter < 0 || h.Rise < 0 || h.Fall < 0 {
		return "", errors.New("health intervals, rise and fall must not be negative")
	}
	var b strings.Builder
	b.WriteString(" check")
	for _, t := range []struct {
		kw string
		v  int64
	}{
		{"inter", h.Interval.Milliseconds()}, {"fastinter", h.FastInter.Milliseconds()}, {"downinter", h.DownInter.Milliseconds()},
	} {
		if t.v > 0 {
			fmt.Fprintf(&b, " %s %dms", t.kw, t.v)
		}
	}
	if h.Rise > 0 {
		b.WriteString(" rise " + strconv.Itoa(h.Rise))
	}
	if h.Fall > 0 {
		b.WriteString(" fall " + strconv.Itoa(h.Fall))
	}
	if p := h.Passive; p != nil {
		switch {
		case p.Observe != "layer7" && p.Observe != "layer4":
			return "", fmt.Errorf("health passive observe %q: must be layer7 or layer4", p.Observe)
		case p.ErrorLimit < 1:
			return "", fmt.Errorf("health passive error_limit %d: must be at least 1", p.ErrorLimit)
		case !isOnError(p.OnError):
			return "", fmt.Errorf("health passive on_error %q: must be mark-down, fail-check, sudden-death or fastinter", p.OnError)
		}
		fmt.Fprintf(&b, " observe %s error-limit %d on-error %s", p.Observe, p.ErrorLimit, p.OnError)
	}
	return b.String(), nil
}

func isOnError(s string) bool {
	switch s {
	case "mark-down", "fail-check", "sudden-death", "fastinter":
		return true
	}
	return false
}
