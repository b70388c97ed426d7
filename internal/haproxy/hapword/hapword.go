// Package hapword holds HAProxy's word rules: what a name, HTTP token,
// host, path, file path, media type or verbatim line may contain to be
// written into haproxy.cfg as it is, how any other text is escaped into one
// word, and the range of HAProxy's millisecond timers.
//
// Config validation and the renderer both need these rules: config so that
// what `shoal validate` accepts is what `shoal serve` can write, and the
// renderer so that nothing it writes can change the file's structure,
// whatever its caller passed. Package haproxy imports config, so the rules
// cannot live in either: they live here, in a leaf that imports nothing of
// shoal's.
package hapword

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// MaxTimer is the longest duration HAProxy's millisecond timers hold.
const MaxTimer = (1<<31 - 1) * time.Millisecond

// IsAlnum reports whether r is an ASCII letter or digit.
func IsAlnum(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
}

// Name accepts what HAProxy allows in proxy, server and ACL names.
func Name(s string) bool {
	return s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !IsAlnum(r) && r != '-' && r != '_' && r != '.' && r != ':'
	})
}

// Host accepts the characters of host names and IP literals (IPv6 in or
// out of brackets); whether the labels make a valid host name is config's
// concern.
func Host(s string) bool {
	return s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !IsAlnum(r) && r != '-' && r != '_' && r != '.' && r != ':' && r != '[' && r != ']'
	})
}

// Method accepts an HTTP method as a health check sends it: upper-case
// letters only.
func Method(s string) bool {
	return s != "" && !strings.ContainsFunc(s, func(r rune) bool { return r < 'A' || r > 'Z' })
}

// HTTPToken accepts a method or header name that is one plain word of
// haproxy.cfg: letters, digits, '-' and '_'.
func HTTPToken(s string) error {
	if s == "" || strings.ContainsFunc(s, func(r rune) bool { return !IsAlnum(r) && r != '-' && r != '_' }) {
		return fmt.Errorf("must be letters, digits, '-' and '_', got %q", s)
	}
	return nil
}

// MediaType accepts type/subtype made of RFC 9110 token characters.
func MediaType(s string) error {
	if s == "" {
		return errors.New("must not be empty")
	}
	if strings.Contains(s, ";") {
		// HAProxy compares the response's type/subtype only, so a parameter
		// could never match; refusing says so instead of dropping it silently.
		return fmt.Errorf("give the media type without parameters (such as %q), got %q", strings.TrimSpace(s[:strings.Index(s, ";")]), s)
	}
	typ, sub, ok := strings.Cut(s, "/")
	if !ok || !isToken(typ) || !isToken(sub) {
		return fmt.Errorf("must be a media type such as text/html, got %q", s)
	}
	return nil
}

// isToken accepts RFC 9110 token characters except those HAProxy's parser
// reads specially ('#' comment, quote, backquote) or that no media type uses.
func isToken(t string) bool {
	return t != "" && !strings.ContainsFunc(t, func(r rune) bool {
		return !IsAlnum(r) && !strings.ContainsRune("!$&^_.+-*", r)
	})
}

// PathPrefix accepts a URL path HAProxy's path_beg can match.
func PathPrefix(p string) error {
	if err := URI(p); err != nil {
		return err
	}
	if strings.Contains(p, "?") {
		return fmt.Errorf("must not contain '?': a prefix is matched against the path without the query string, got %q", p)
	}
	return nil
}

// URI accepts a request URI, a path that may carry a query, as one word
// (the health check's).
func URI(p string) error {
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("must start with \"/\", got %q", p)
	}
	if strings.Contains(p, "#") {
		return fmt.Errorf("must not contain '#': a fragment is never sent to a server (and starts a comment in haproxy.cfg), got %q", p)
	}
	if strings.ContainsFunc(p, func(r rune) bool { return r <= ' ' || r >= 0x7f || strings.ContainsRune(`"'\`, r) }) {
		return fmt.Errorf("must be printable ASCII without spaces, quotes or '\\' (percent-encode other characters, e.g. %%20 for a space), got %q", p)
	}
	return nil
}

// Location accepts a redirect target: an absolute http(s) URL or a path,
// printable ASCII without spaces.
func Location(l string) error {
	if !strings.HasPrefix(l, "/") && !strings.HasPrefix(l, "http://") && !strings.HasPrefix(l, "https://") {
		return fmt.Errorf("must be a path starting with \"/\" or an http:// or https:// URL, got %q", l)
	}
	if strings.ContainsFunc(l, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
		return fmt.Errorf("must be printable ASCII without spaces (percent-encode the rest), got %q", l)
	}
	return nil
}

// FilePath accepts a path that is one word in haproxy.cfg and on HAProxy's
// command line (-S splits on commas).
func FilePath(p string) error {
	if p == "" {
		return errors.New("must not be empty")
	}
	if strings.ContainsFunc(p, func(r rune) bool { return r <= ' ' || r == 0x7f || strings.ContainsRune(`#"'\,`, r) }) {
		return fmt.Errorf("must not contain spaces, control characters, quotes, '#', '\\' or ',' (HAProxy takes it as one word), got %q", p)
	}
	return nil
}

// sectionKeywords start a new haproxy.cfg section; a verbatim global or
// defaults line starting with one would silently move the lines after it.
var sectionKeywords = map[string]bool{
	"global": true, "defaults": true, "frontend": true, "backend": true, "listen": true,
	"peers": true, "resolvers": true, "userlist": true, "mailers": true, "program": true,
	"http-errors": true, "ring": true, "cache": true, "fcgi-app": true,
}

// Line keeps an extra haproxy.cfg line, written as given, on its line and in
// its section.
func Line(l string) error {
	if strings.ContainsFunc(l, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }) {
		return errors.New("must be a single line without control characters")
	}
	if f := strings.Fields(l); len(f) > 0 && sectionKeywords[f[0]] {
		return fmt.Errorf("must not start a new haproxy.cfg section (%q); shoal writes the sections itself", f[0])
	}
	if f := strings.Fields(l); len(f) > 0 && (f[0] == "server-state-file" || f[0] == "server-state-base" || f[0] == "load-server-state-from-file") {
		return fmt.Errorf("must not use a server-state file (%q): shoal writes every server into the configuration before each reload, and a state file would override it at every reload", f[0])
	}
	return nil
}

// Escape writes s as one haproxy.cfg word: characters that are plain in
// every context stay, every other byte becomes \xNN, which HAProxy's parser
// decodes before the keyword sees it (so no quote, '#', '$' or space is ever
// read as syntax).
func Escape(s string) (string, error) {
	if s == "" {
		return "", errors.New("must not be empty")
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == 0 {
			return "", errors.New("must not contain NUL bytes")
		}
		if IsAlnum(rune(c)) || strings.IndexByte("-._/:=,@%+", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, `\x%02x`, c)
		}
	}
	return b.String(), nil
}
