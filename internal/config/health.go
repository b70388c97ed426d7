package config

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/shoal-lb/shoal/internal/haproxy/hapword"
)

// maxCheckString bounds strings that go into the check request or must be
// found in its answer, which HAProxy reads into one buffer (16 KB).
const maxCheckString = 1024

var (
	checkTypes   = []string{"http", "tcp"}
	checkMethods = []string{"GET", "HEAD", "OPTIONS", "POST", "PUT", "DELETE", "PATCH", "TRACE"}
	observeModes = []string{"layer7", "layer4"}
	onErrors     = []string{"mark-down", "fail-check", "sudden-death", "fastinter"}
)

func (d *decoder) health(n *yaml.Node, path string) Health {
	f := section[Health](d, n, path)
	def := DefaultHealth
	h := Health{Type: def.Type, Method: def.Method, Path: def.Path, Host: def.Host, Status: slices.Clone(def.Status)}

	if t, tn := f.str("type", def.Type); tn != nil {
		if !slices.Contains(checkTypes, t) {
			d.errorf(tn, f.field("type"), "must be http or tcp, got %q", t)
		} else {
			h.Type = t
		}
	}
	// Fields of the other check type are mistakes, not something to ignore.
	other, otherType := []string{"send", "expect"}, "tcp"
	if h.Type == "tcp" {
		other, otherType = []string{"method", "path", "host", "status", "body", "body_regex"}, "http"
	}
	for _, k := range other {
		if n := f.get(k); n != nil {
			d.errorf(n, f.field(k), "applies only to type: %s checks", otherType)
		}
	}

	if h.Type == "http" {
		if m, mn := f.str("method", def.Method); mn != nil {
			if !slices.Contains(checkMethods, m) {
				d.errorf(mn, f.field("method"), "must be one of %s, got %q", strings.Join(checkMethods, ", "), m)
			} else {
				h.Method = m
			}
		}
		if p, pn := f.str("path", ""); pn != nil {
			if err := hapword.URI(p); err == nil && len(p) > maxCheckString {
				d.errorf(pn, f.field("path"), "must be at most %d bytes, got %d", maxCheckString, len(p))
			} else if err != nil {
				d.errorf(pn, f.field("path"), "%v", err)
			} else {
				h.Path = p
			}
		}
		if host, hn := f.str("host", ""); hn != nil {
			if err := checkHostHeader(host); err != nil {
				d.errorf(hn, f.field("host"), "%v", err)
			} else {
				h.Host = host
			}
		}
		if sn := f.get("status"); sn != nil {
			if st := d.statusRanges(sn, f.field("status")); len(st) > 0 {
				h.Status = st
			}
		}
		body, bn := d.checkString(f, "body", false)
		re, rn := d.checkString(f, "body_regex", false)
		if rn != nil {
			if _, err := regexp.Compile(re); err != nil {
				d.errorf(rn, f.field("body_regex"), "does not compile: %v", err)
			}
		}
		switch {
		case bn != nil && rn != nil:
			d.errorf(rn, f.field("body_regex"), "conflicts with body; set only one")
		case bn != nil && h.Method == "HEAD":
			d.errorf(bn, f.field("body"), "cannot be checked with method HEAD: the answer has no body")
		case rn != nil && h.Method == "HEAD":
			d.errorf(rn, f.field("body_regex"), "cannot be checked with method HEAD: the answer has no body")
		}
		h.Body, h.BodyRegex = body, re
	} else {
		h.Path, h.Host, h.Method, h.Status = "", "", "", nil
		// Bytes such as "\r\n" are the point of send and expect.
		h.Send, _ = d.checkString(f, "send", true)
		h.Expect, _ = d.checkString(f, "expect", true)
	}

	// HAProxy counts check intervals in milliseconds, in a signed 32-bit timer.
	h.Interval = d.timer(f, "interval", def.Interval)
	h.Timeout = d.timer(f, "timeout", def.Timeout)
	// A server that stops answering is DOWN after about interval +
	// fall × (timeout + fastinter), and HAProxy retries the requests it held
	// then (see internal/haproxy): the default fastinter keeps that near 6 s.
	h.FastInter = d.timer(f, "fastinter", min(h.Interval, def.FastInter))
	if f.get("downinter") != nil {
		h.DownInter = d.timer(f, "downinter", 0)
	}
	h.Grace = d.within(f, "grace", def.Grace, time.Millisecond, maxTimeout)
	h.Rise = d.count(f, "rise", def.Rise)
	h.Fall = d.count(f, "fall", def.Fall)
	d.checkGrace(f, h)
	if pn := f.get("passive"); pn != nil {
		h.Passive = d.passive(pn, f.field("passive"))
	}
	return h
}

// checkGrace reports a grace too short for a healthy instance to pass: it
// joins down, so it needs one check at downinter and rise-1 at fastinter
// (each falls back to interval), the last of which may take the timeout.
func (d *decoder) checkGrace(f *fields, h Health) {
	first, next := cmp.Or(h.DownInter, h.Interval), cmp.Or(h.FastInter, h.Interval)
	need := first + time.Duration(h.Rise-1)*next + h.Timeout
	if h.Grace >= need {
		return
	}
	at, what := f.get("grace"), ""
	if at == nil {
		at, what = cmp.Or(f.get("interval"), f.get("downinter"), f.get("fastinter"), f.get("timeout"), f.get("rise"), f.node), " (the default)"
	}
	if at == nil {
		return
	}
	sum := fmt.Sprintf("rise × interval + timeout = %d × %s + %s", h.Rise, h.Interval, h.Timeout)
	if first != h.Interval || next != h.Interval {
		sum = fmt.Sprintf("downinter + (rise - 1) × fastinter + timeout = %s + %d × %s + %s", first, h.Rise-1, next, h.Timeout)
	}
	d.errorf(at, f.field("grace"), "%s%s is shorter than %s = %s, so a healthy instance is stopped before it can pass; set grace to at least %s",
		h.Grace, what, sum, need, need)
}

// checkString reads a string that shoal escapes into HAProxy's config, so
// spaces and quotes are fine; control characters only where binary is
// (tcp send and expect).
func (d *decoder) checkString(f *fields, key string, binary bool) (string, *yaml.Node) {
	s, n := f.str(key, "")
	if n == nil {
		return "", nil
	}
	var err error
	switch {
	case s == "":
		err = errors.New("must not be empty; leave it out instead")
	case len(s) > maxCheckString:
		err = fmt.Errorf("must be at most %d bytes, got %d", maxCheckString, len(s))
	case !binary && !utf8.ValidString(s):
		err = errors.New("must be valid UTF-8")
	case !binary && strings.ContainsFunc(s, unicode.IsControl):
		err = fmt.Errorf("must not contain control characters, got %q", truncate(s))
	}
	if err != nil {
		d.errorf(n, f.field(key), "%v", err)
		return "", nil
	}
	return s, n
}

// checkHostHeader accepts a host name or IP address with an optional port.
func checkHostHeader(s string) error {
	host := s
	if h, port, err := net.SplitHostPort(s); err == nil {
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return fmt.Errorf("port must be a number from 1 to 65535, got %q", port)
		}
		host = h
	}
	if host == "" || len(host) > 253 {
		return fmt.Errorf("must be a host name or IP address with an optional :port, got %q", s)
	}
	if ip := net.ParseIP(host); ip != nil {
		if ip.To4() == nil && !strings.HasPrefix(s, "[") {
			return fmt.Errorf("an IPv6 address must be in brackets, such as [::1], got %q", s)
		}
		return nil
	}
	for _, label := range strings.Split(host, ".") {
		ok := label != "" && len(label) <= 63 && label[0] != '-' && !strings.ContainsFunc(label, func(r rune) bool {
			return !hapword.IsAlnum(r) && r != '-' && r != '_'
		})
		if !ok {
			return fmt.Errorf("must be a host name or IP address with an optional :port, got %q", s)
		}
	}
	return nil
}

// statusRanges reads the accepted status codes: one code, a range "200-399",
// or a list of either.
func (d *decoder) statusRanges(n *yaml.Node, path string) []StatusRange {
	items := []*yaml.Node{n}
	if n.Kind == yaml.SequenceNode {
		var ok bool
		if items, ok = d.sequence(n, path, "a list of status codes or ranges"); !ok {
			return nil
		}
		if len(items) == 0 {
			d.errorf(n, path, "must list at least one status code or range; leave it out for 200-399")
			return nil
		}
	}
	var out []StatusRange
	for i, it := range items {
		field := path
		if n.Kind == yaml.SequenceNode {
			field = fmt.Sprintf("%s[%d]", path, i)
		}
		r, err := parseStatusRange(it)
		if err != nil {
			d.errorf(it, field, "%v", err)
			continue
		}
		out = append(out, r)
	}
	if len(out) != len(items) {
		return nil
	}
	return out
}

func parseStatusRange(n *yaml.Node) (StatusRange, error) {
	const want = `must be an HTTP status code from 100 to 599 or a range such as "200-399"`
	if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!int" && n.ShortTag() != "!!str") {
		return StatusRange{}, fmt.Errorf("%s, got %s", want, describe(n))
	}
	lo, hi, isRange := strings.Cut(n.Value, "-")
	if !isRange {
		hi = lo
	}
	a, errA := strconv.Atoi(strings.TrimSpace(lo))
	b, errB := strconv.Atoi(strings.TrimSpace(hi))
	switch {
	case errA != nil || errB != nil:
		return StatusRange{}, fmt.Errorf("%s, got %s", want, describe(n))
	case a < 100 || a > 599 || b < 100 || b > 599:
		return StatusRange{}, fmt.Errorf("%s: %s is out of 100-599", want, n.Value)
	case a > b:
		return StatusRange{}, fmt.Errorf("range %s is empty: its start is above its end", n.Value)
	}
	return StatusRange{a, b}, nil
}

func (d *decoder) passive(n *yaml.Node, path string) *Passive {
	f := section[Passive](d, n, path)
	if f.node == nil {
		return nil
	}
	// A passive section is on unless it says otherwise, so it can be switched
	// off without deleting its settings.
	p := new(defaultPassive)
	p.Enabled, _ = f.boolean("enabled", p.Enabled)
	if o, on := f.str("observe", ""); on != nil {
		if !slices.Contains(observeModes, o) {
			d.errorf(on, f.field("observe"), "must be one of %s, got %q", strings.Join(observeModes, ", "), o)
		} else {
			p.Observe = o
		}
	}
	p.ErrorLimit = d.count(f, "error_limit", p.ErrorLimit)
	if o, on := f.str("on_error", ""); on != nil {
		if !slices.Contains(onErrors, o) {
			d.errorf(on, f.field("on_error"), "must be one of %s, got %q", strings.Join(onErrors, ", "), o)
		} else {
			p.OnError = o
		}
	}
	if !p.Enabled {
		return nil
	}
	return p
}
