package cli

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shoal-lb/shoal/internal/group"
)

// openPTY returns the two ends of a real pseudo-terminal, cols wide.
func openPTY(t *testing.T, cols uint16) (master, tty *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetUint32(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := unix.IoctlSetWinsize(int(s.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Col: cols, Row: 24}); err != nil {
		t.Fatal(err)
	}
	return m, s
}

// A terminal is live, with its width; a pipe, a file or a buffer is not.
func TestTerminal(t *testing.T) {
	_, tty := openPTY(t, 100)
	if w, ok := terminal(tty); !ok || w != 100 {
		t.Errorf("terminal(pty) = %d, %v; want 100, true", w, ok)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if _, ok := terminal(w); ok {
		t.Error("a pipe is taken for a terminal")
	}
	if _, ok := terminal(&bytes.Buffer{}); ok {
		t.Error("a buffer is taken for a terminal")
	}
}

// A live line goes back to the start of the line, erases it, and fits in
// the width without wrapping; the elapsed time is in whole seconds.
func TestLiveLine(t *testing.T) {
	got := liveLine("1/2 in service: web-1 in-service", 12*time.Second+300*time.Millisecond, 80)
	if want := "\r\x1b[K[12s] 1/2 in service: web-1 in-service"; got != want {
		t.Errorf("liveLine = %q, want %q", got, want)
	}
	got = liveLine(strings.Repeat("x", 100), time.Second, 20)
	if want := "\r\x1b[K[1s] xxxxxxxxxxxxx…"; got != want {
		t.Errorf("cut liveLine = %q, want %q (19 columns)", got, want)
	}
}

// Plain, a progress line is printed when it changes; live, every update
// rewrites the line, and end leaves a clean line for the job's result.
func TestProgressLine(t *testing.T) {
	start := time.Date(2026, 11, 25, 13, 0, 0, 0, time.UTC)
	var plain bytes.Buffer
	p := newProgressLine(&plain, start)
	for i, text := range []string{"0/1 in service: web-1 starting", "0/1 in service: web-1 starting", "1/1 in service: web-1 in-service"} {
		p.update(start.Add(time.Duration(i)*time.Second), text)
	}
	p.end()
	want := "  13:00:00  0/1 in service: web-1 starting\n  13:00:02  1/1 in service: web-1 in-service\n"
	if plain.String() != want {
		t.Errorf("plain:\n%q\nwant:\n%q", plain.String(), want)
	}

	m, tty := openPTY(t, 80)
	p = newProgressLine(tty, start)
	if !p.live {
		t.Fatal("not live on a terminal")
	}
	p.update(start.Add(time.Second), "0/1 in service: web-1 starting")
	p.update(start.Add(2*time.Second), "0/1 in service: web-1 starting")
	p.end()
	fmt.Fprintln(tty, "job 1 done")
	// The terminal turns \n into \r\n.
	want = "\r\x1b[K[1s] 0/1 in service: web-1 starting\r\x1b[K[2s] 0/1 in service: web-1 starting\r\x1b[Kjob 1 done\r\n"
	var got []byte
	buf := make([]byte, 4096)
	_ = m.SetReadDeadline(time.Now().Add(5 * time.Second))
	for len(got) < len(want) {
		n, err := m.Read(buf)
		if err != nil {
			t.Fatalf("read the terminal after %q: %v", got, err)
		}
		got = append(got, buf[:n]...)
	}
	if string(got) != want {
		t.Errorf("on the terminal:\n%q\nwant:\n%q", string(got), want)
	}
}

// A deploy's live line counts the instances in service on the new version.
func TestDeployProgress(t *testing.T) {
	g := group.Status{Desired: 3, Instances: []group.InstanceStatus{
		{Name: "web-1", State: group.InService, Version: "v2"},
		{Name: "web-2", State: group.InService, Version: "v1"},
		{Name: "web-4", State: group.Starting, Version: "v2"},
	}}
	want := "1/3 on version v2: web-1 in-service v2, web-2 in-service v1, web-4 starting v2"
	if got := deployProgress(g, "v2"); got != want {
		t.Errorf("deployProgress = %q, want %q", got, want)
	}
}
