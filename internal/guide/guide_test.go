package guide

import (
	"strings"
	"testing"
)

const md = "intro\n" +
	"<!-- guide-test package -->\n" +
	"```console\n" +
	"$ sudo apt-get install ./shoal_*_amd64.deb\n" +
	"…\n" +
	"Setting up shoal (0.1) ...\n" +
	"```\n" +
	"```console\n" +
	"$ not tested\n" +
	"```\n" +
	"<!-- guide-test -->\n" +
	"```console\n" +
	"$ openssl req -x509 \\\n" +
	"    -out a.crt\n" +
	"$ cat > f <<'EOF'\n" +
	"$ not a command\n" +
	"EOF\n" +
	"$ ls\n" +
	"\n" +
	"a.crt\n" +
	"```\n"

func TestParse(t *testing.T) {
	steps, err := Parse(md)
	if err != nil {
		t.Fatal(err)
	}
	want := []Step{
		{Line: 4, Cmd: "sudo apt-get install ./shoal_*_amd64.deb", Want: []string{"Setting up shoal (0.1) ..."}, Package: true},
		{Line: 13, Cmd: "openssl req -x509 \\\n    -out a.crt"},
		{Line: 15, Cmd: "cat > f <<'EOF'\n$ not a command\nEOF"},
		{Line: 18, Cmd: "ls", Want: []string{"a.crt"}},
	}
	if len(steps) != len(want) {
		t.Fatalf("got %d steps %+v, want %d", len(steps), steps, len(want))
	}
	for i, s := range steps {
		w := want[i]
		if s.Line != w.Line || s.Cmd != w.Cmd || s.Package != w.Package || strings.Join(s.Want, "|") != strings.Join(w.Want, "|") {
			t.Errorf("step %d: got %+v, want %+v", i, s, w)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, bad := range []string{
		"<!-- guide-test -->\n```sh\n$ ls\n```\n",
		"<!-- guide-test -->\n```console\n$ ls\n",
		"<!-- guide-test -->\n```console\noutput first\n```\n",
		"<!-- guide-test -->\n```console\n$ cat <<EOF\nno end\n```\n",
	} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q): no error", bad)
		}
	}
}

func TestLineMatches(t *testing.T) {
	for _, c := range []struct {
		want, got string
		ok        bool
	}{
		{"web-001 worked 1ms", "web-002 worked 3ms", true},
		{"CHECK  L7OK 200  0s ago", "CHECK L7OK 200 19ms 2s ago", true},
		{"shoal stopped, with HAProxy", "shoal  stopped, with HAProxy  ", true},
		{"shoal stopped, with HAProxy", "shoal stopped, without HAProxy", false},
		{"ok", "ok then", false},
		{"Setting up shoal (0.0~git1.abc) ...", "Setting up shoal (0.0~git20261206.278c404) ...", true},
	} {
		if got := LineMatches(c.want, c.got); got != c.ok {
			t.Errorf("LineMatches(%q, %q) = %v, want %v", c.want, c.got, got, c.ok)
		}
	}
}

func TestMissing(t *testing.T) {
	out := "a 1\nb\nc\n"
	id := func(s string) string { return s }
	if l, missing := Missing([]string{"a 9", "c"}, out, id); missing {
		t.Errorf("Missing: %q", l)
	}
	if l, missing := Missing([]string{"c", "b"}, out, id); !missing || l != "b" {
		t.Errorf("out of order: got %q %v, want b missing", l, missing)
	}
	if l, missing := Missing([]string{"X"}, out, func(string) string { return "b" }); missing {
		t.Errorf("subst not applied: %q", l)
	}

	// Lines shown at one time may print in either order; the next line
	// still comes after both, and one printed line matches one shown.
	events := "2026-12-06 19:49:09  web  instance  launched web-003\n2026-12-06 19:49:09  web  busy  accepted\n2026-12-06 19:49:10  web  busy  job_running\n"
	shown := []string{"2026-12-06 09:47:44  web  busy  accepted", "2026-12-06 09:47:44  web  instance  launched web-003", "2026-12-06 09:47:45  web  busy  job_running"}
	if l, missing := Missing(shown, events, id); missing {
		t.Errorf("lines of one time in the other order: %q missing", l)
	}
	if l, missing := Missing([]string{shown[2], shown[0]}, events, id); !missing || l != shown[0] {
		t.Errorf("lines of other times out of order: got %q %v, want %q missing", l, missing, shown[0])
	}
	twice := []string{"2026-12-06 09:47:44  web  busy  accepted", "2026-12-06 09:47:44  web  busy  accepted"}
	if _, missing := Missing(twice, events, id); !missing {
		t.Error("a line shown twice at one time matched one printed line twice")
	}
}
