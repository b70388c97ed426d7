package hapword

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/testdep"
)

// words are the edge cases of each rule: the accepted ones are written into
// haproxy.cfg in the place shoal writes them (see TestAcceptedWordsPassHAProxy).
var words = []struct {
	rule     string
	ok       func(string) bool
	accepted []string
	refused  []string
}{
	{"Name", Name,
		[]string{"web", "a.b-c_d:e", "1", "UPPER"},
		[]string{"", "a b", "a/b", "a@b", "a+b", "a,b", "a#b", `a"b`, "é", "a\nb"}},
	{"Host", Host,
		[]string{"localhost", "api.example.com", "a_b", "127.0.0.1", "[::1]", "::1", "xn--bcher-kva.example"},
		[]string{"", "a b", "a#b", `a"b`, "a/b", "a,b", "bücher.example", "a\tb"}},
	{"Method", Method,
		[]string{"GET", "PURGE"},
		[]string{"", "get", "GET ", "G-T", "G_T", "GET1"}},
	{"HTTPToken", ok(HTTPToken),
		[]string{"X-Api-Key", "x_y", "GET", "1"},
		[]string{"", "X Api", "X:Y", "X(1)", "X.Y", "X#", "é"}},
	{"MediaType", ok(MediaType),
		[]string{"text/html", "application/vnd.api+json", "image/*", "a!$&^_.+-*/b"},
		[]string{"", "text", "text/", "/html", "text/html; charset=utf-8", "text/ht#ml", `text/"x"`, "text/a/b", "text /html"}},
	{"PathPrefix", ok(PathPrefix),
		[]string{"/", "/v1/", "/a%20b", "/~user/x.y-z_(1)", "/a$b", "/a{b}[c]"},
		[]string{"", "v1", "/a b", "/a#b", "/a?b", `/a"b`, "/a'b", `/a\b`, "/é", "/a\x7f"}},
	{"URI", ok(URI),
		[]string{"/healthz", "/healthz?full=1&x=y", "/a%20b?q=$x"},
		[]string{"", "healthz", "/a#frag", "/a b", `/a\b`, "/é"}},
	{"Location", ok(Location),
		[]string{"/x", "https://new.example.org/100%", `http://a/b?c="d"#e`, "/a'b\\c"},
		[]string{"", "ftp://x", "x", "/a b", "/é", "/a\tb"}},
	{"FilePath", ok(FilePath),
		[]string{"/var/lib/shoal/haproxy/admin.sock", "/a:b@c=d+e", "relative/x.pem"},
		[]string{"", "/a b", "/a,b", "/a#b", `/a"b`, "/a'b", `/a\b`, "/a\x7f", "/a\nb"}},
	{"Line", ok(Line),
		[]string{"nbthread 1", "tune.bufsize 16384", "\tmaxconn 100", "log stdout format raw local0", ""},
		[]string{"backend x", "  listen y", "a\nb", "a\rb", "a\x7f", "server-state-file /x", "load-server-state-from-file global"}},
}

func ok(check func(string) error) func(string) bool {
	return func(s string) bool { return check(s) == nil }
}

func TestWordRules(t *testing.T) {
	for _, w := range words {
		for _, s := range w.accepted {
			if !w.ok(s) {
				t.Errorf("%s(%q) refused, want accepted", w.rule, s)
			}
		}
		for _, s := range w.refused {
			if w.ok(s) {
				t.Errorf("%s(%q) accepted, want refused", w.rule, s)
			}
		}
	}
}

func TestErrorsNameTheProblem(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{MediaType("text/html; charset=utf-8"), `give the media type without parameters (such as "text/html")`},
		{PathPrefix("/a?b"), "must not contain '?'"},
		{URI("/a#b"), "must not contain '#'"},
		{FilePath("/a,b"), "must not contain spaces, control characters, quotes, '#', '\\' or ','"},
		{Line("backend x"), `must not start a new haproxy.cfg section ("backend")`},
		{Line("server-state-file /x"), `must not use a server-state file ("server-state-file")`},
		{HTTPToken("X:Y"), `must be letters, digits, '-' and '_', got "X:Y"`},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("error %v, want it to contain %q", c.err, c.want)
		}
	}
}

// unescape reverses Escape as HAProxy's parser does.
func unescape(t *testing.T, w string) string {
	t.Helper()
	var b strings.Builder
	for i := 0; i < len(w); i++ {
		if w[i] != '\\' {
			b.WriteByte(w[i])
			continue
		}
		if i+3 >= len(w) || w[i+1] != 'x' {
			t.Fatalf("bad escape in %q at %d", w, i)
		}
		n, err := strconv.ParseUint(w[i+2:i+4], 16, 8)
		if err != nil {
			t.Fatalf("bad escape in %q at %d: %v", w, i, err)
		}
		b.WriteByte(byte(n))
		i += 3
	}
	return b.String()
}

var escaped = []string{
	"plain-._/:=,@%+",
	"a b",
	`"quoted" 'single' # not a comment $HOME ${X} \`,
	"bücher\nline\ttab",
	"{ path_beg /x } if !",
}

func TestEscape(t *testing.T) {
	for _, s := range escaped {
		w, err := Escape(s)
		if err != nil {
			t.Fatalf("Escape(%q): %v", s, err)
		}
		if strings.ContainsFunc(w, func(r rune) bool { return !IsAlnum(r) && !strings.ContainsRune(`-._/:=,@%+\`, r) }) {
			t.Errorf("Escape(%q) = %q: holds a character HAProxy's parser may read as syntax", s, w)
		}
		if got := unescape(t, w); got != s {
			t.Errorf("Escape(%q) = %q, which decodes to %q", s, w, got)
		}
	}
	if w, _ := Escape("plain-._/:=,@%+"); w != "plain-._/:=,@%+" {
		t.Errorf("plain word escaped: %q", w)
	}
	for _, s := range []string{"", "a\x00b"} {
		if w, err := Escape(s); err == nil {
			t.Errorf("Escape(%q) = %q, want an error", s, w)
		}
	}
}

// haproxyCheck runs `haproxy -c` on cfg and returns its output and whether
// HAProxy accepted it.
func haproxyCheck(t *testing.T, cfg string) (string, bool) {
	t.Helper()
	bin := testdep.Command(t, "haproxy", "haproxy")
	path := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "-c", "-f", path).CombinedOutput()
	if err != nil {
		if _, exit := err.(*exec.ExitError); !exit {
			t.Fatalf("haproxy -c: %v", err)
		}
	}
	return string(out), err == nil
}

// TestAcceptedWordsPassHAProxy writes every accepted word where shoal writes
// it and has HAProxy 2.6 check the file: a rule must never accept what
// HAProxy refuses.
func TestAcceptedWordsPassHAProxy(t *testing.T) {
	accepted := func(rule string) []string {
		for _, w := range words {
			if w.rule == rule {
				return w.accepted
			}
		}
		t.Fatalf("no rule %s", rule)
		return nil
	}
	var b strings.Builder
	b.WriteString("global\n")
	for _, l := range accepted("Line") {
		b.WriteString("    " + l + "\n")
	}
	for i, p := range accepted("FilePath") {
		b.WriteString("    " + []string{"pidfile", "ca-base", "crt-base"}[i] + " " + p + "\n")
	}
	b.WriteString("\ndefaults\n    mode http\n")
	b.WriteString("    timeout client " + strconv.FormatInt(MaxTimer.Milliseconds(), 10) + "ms\n")
	b.WriteString("    timeout connect 1ms\n    timeout server 1s\n")
	b.WriteString("\nfrontend fe\n    bind 127.0.0.1:8080\n")
	b.WriteString("    compression algo gzip\n    compression type " + strings.Join(accepted("MediaType"), " ") + "\n")
	b.WriteString("    acl p path_beg " + strings.Join(accepted("PathPrefix"), " ") + "\n")
	b.WriteString("    acl h hdr(host) -i " + strings.Join(accepted("Host"), " ") + "\n")
	b.WriteString("    acl m method " + strings.Join(accepted("HTTPToken"), " ") + "\n")
	for i, tok := range accepted("HTTPToken") {
		b.WriteString("    acl f" + strconv.Itoa(i) + " req.fhdr(" + tok + ") -m found\n")
	}
	for i, s := range escaped {
		w, err := Escape(s)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("    acl e" + strconv.Itoa(i) + " req.fhdr(x) -m str " + w + "\n")
		b.WriteString("    http-request return status 200 content-type " + w + " string " + w + " if e" + strconv.Itoa(i) + "\n")
	}
	for _, l := range accepted("Location") {
		w, err := Escape(strings.ReplaceAll(l, "%", "%%"))
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("    http-request redirect location " + w + " code 302 if p\n")
	}
	b.WriteString("    default_backend " + accepted("Name")[0] + "\n")
	for i, n := range accepted("Name") {
		b.WriteString("\nbackend " + n + "\n    option httpchk\n")
		b.WriteString("    http-check send meth " + accepted("Method")[i%len(accepted("Method"))] +
			" uri " + accepted("URI")[i%len(accepted("URI"))] + " ver HTTP/1.1 hdr Host " + accepted("Host")[i%len(accepted("Host"))] + "\n")
	}
	cfg := b.String()
	if out, ok := haproxyCheck(t, cfg); !ok {
		t.Fatalf("haproxy -c refused the accepted words:\n%s\n%s", out, cfg)
	}
}

// TestRefusedEdgesFailHAProxy: names Name refuses although they are one word
// are refused by HAProxy too, and a timer one millisecond over MaxTimer
// overflows.
func TestRefusedEdgesFailHAProxy(t *testing.T) {
	const base = "defaults\n    mode http\n    timeout connect 1s\n    timeout client 1s\n    timeout server 1s\n"
	for _, n := range []string{"a/b", "a@b", "a+b", "a,b", "é"} {
		if Name(n) {
			t.Fatalf("Name(%q) accepted", n)
		}
		if out, ok := haproxyCheck(t, base+"\nbackend "+n+"\n"); ok || !strings.Contains(out, "is not permitted in 'backend' name") {
			t.Errorf("haproxy -c on backend %q, which Name refuses: accepted %v, want refused for the name:\n%s", n, ok, out)
		}
	}
	over := strconv.FormatInt((MaxTimer+time.Millisecond).Milliseconds(), 10) + "ms"
	if out, ok := haproxyCheck(t, base+"\nbackend b\n    timeout server "+over+"\n"); ok || !strings.Contains(out, "timer overflow") {
		t.Errorf("haproxy -c on timeout server %s, over MaxTimer: accepted %v, want a timer overflow:\n%s", over, ok, out)
	}
}
