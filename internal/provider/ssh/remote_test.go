package ssh

import (
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// hostile are arguments that break any quoting short of the real thing.
var hostile = []string{
	"plain", "two words", "", "'", `"`, `'\''`, "$(touch /tmp/pwned)", "`id`", "$HOME", "a;b", "a && b",
	"line\nbreak", "tab\there", `back\slash`, "*", "~", "-n", "#comment", "x'$(evil)'y", "\"$(evil)'x", "{a,b}", "!", "%s",
}

// TestCommandLine runs hostile argv through a real `sh -c` (as sshd does
// with the command line) and checks every word arrives verbatim.
func TestCommandLine(t *testing.T) {
	argv := slices.Concat([]string{"printf", `%s\0`}, hostile)
	out, err := exec.Command("sh", "-c", commandLine(argv)).Output()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if !slices.Equal(got, hostile) {
		t.Errorf("sh -c %s\ngave %q\nwant %q", commandLine(argv), got, hostile)
	}
}

// TestScriptArgs: a constant script sees its data as $1… verbatim, through
// the login shell's parsing and then its own.
func TestScriptArgs(t *testing.T) {
	argv := script(`for a; do printf '%s\0' "$a"; done`, hostile...)
	out, err := exec.Command("sh", "-c", commandLine(argv)).Output()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if !slices.Equal(got, hostile) {
		t.Errorf("got %q\nwant %q", got, hostile)
	}
}

func TestTailBuffer(t *testing.T) {
	b := &tailBuffer{max: 4}
	b.Write([]byte("abc"))
	b.Write([]byte("defg"))
	if b.String() != "defg" {
		t.Errorf("tail = %q", b.String())
	}
	var out bytes.Buffer
	w := &limitWriter{w: &out, left: 3}
	if n, err := w.Write([]byte("12345")); n != 5 || err != nil || out.String() != "123" {
		t.Errorf("limitWriter: %d %v %q", n, err, out.String())
	}
}

func TestParseListening(t *testing.T) {
	in := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:4E20 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0
   1: 0100007F:4E21 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 100 0 0 10 0
   0: 00000000000000000000000000000000:4E22 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 3 1 0000000000000000 100 0 0 10 0
`
	got := parseListening([]byte(in))
	if len(got) != 2 || !got[20000] || !got[20002] {
		t.Errorf("listening = %v, want 20000 and 20002", got)
	}
}
