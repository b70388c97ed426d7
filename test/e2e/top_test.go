package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestTop: shoal top with its stdout not a terminal prints a plain line per
// group and refresh, with the group's size and the load measured through
// real HAProxy, and each decision once (a scale-in's here); on a terminal
// (a pseudo-terminal that script(1) gives it) it draws the view in place on
// the alternate screen and gives the screen back.
func TestTop(t *testing.T) {
	parallel(t)
	g := web
	g.Min, g.Max, g.Plans = 1, 3, ""
	e := newEnv(t, "access_log: {sample: auto}\n", g) // p99 is read from it
	e.start()
	e.waitInService("web", 1)
	scaleSync(t, e, "--size", "2")
	scaleSync(t, e, "--size", "1") // retires one: a scale_in decision
	stop := load(t, e)

	const refreshes = 3
	var out string
	e.eventually("shoal top shows the load", 30*time.Second, func() error {
		o, stderr, code := e.cli("top", "web", "-n", strconv.Itoa(refreshes), "--interval", "300ms")
		if code != 0 {
			return fmt.Errorf("shoal top exited %d: %s", code, stderr)
		}
		out = o
		var rows []string
		for _, l := range strings.Split(strings.TrimSpace(o), "\n") {
			if f := strings.Fields(l); len(f) > 1 && f[1] == "web" {
				rows = append(rows, l)
			}
		}
		if len(rows) != refreshes {
			return fmt.Errorf("%d group lines for %d refreshes:\n%s", len(rows), refreshes, o)
		}
		// TIME GROUP PLAN SIZE (MIN-MAX) CPU REQ/S P99
		f := strings.Fields(rows[len(rows)-1])
		if len(f) != 8 || f[3] != "1/1" || f[4] != "(1-3)" {
			return fmt.Errorf("last line %q: want web at 1/1 (1-3)", rows[len(rows)-1])
		}
		if rps, err := strconv.ParseFloat(f[6], 64); err != nil || rps <= 0 {
			return fmt.Errorf("requests/s %q in %q: not measured yet", f[6], rows[len(rows)-1])
		}
		// CPU p90 is "-" until the instance's warmup is over.
		if !strings.HasSuffix(f[7], "ms") || f[5] != "-" && !strings.HasSuffix(f[5], "%") {
			return fmt.Errorf("p99 %q or CPU %q in %q", f[7], f[5], rows[len(rows)-1])
		}
		return nil
	})
	res := stop()
	t.Logf("shoal top:\n%s(load: %d requests, %d failures)", out, res.Requests, res.Failures)
	if n := strings.Count(out, "scale_in (job 2)"); n != 1 {
		t.Errorf("the scale-in decision is printed %d times, want once:\n%s", n, out)
	}
	if strings.ContainsRune(out, '\x1b') {
		t.Errorf("escape sequences when stdout is not a terminal:\n%q", out)
	}

	script, err := exec.LookPath("script")
	if err != nil {
		t.Skip("no script(1) to run shoal top on a terminal")
	}
	top := fmt.Sprintf("%s top web -n 2 --interval 200ms -c %s", filepath.Join(binDir, "shoal"), e.cfgPath)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, err := exec.CommandContext(ctx, script, "-qec", top, "/dev/null").Output()
	if err != nil {
		t.Fatalf("shoal top on a terminal: %v\n%q", err, b)
	}
	screen := string(b)
	for _, want := range []string{"\x1b[?1049h\x1b[?25l\x1b[H", "shoal top  ", "GROUP ", "\r\nweb ", "  req/s ", "LAST DECISIONS", "scale_in (job 2)", "\x1b[J\x1b[?25h\x1b[?1049l"} {
		if !strings.Contains(screen, want) {
			t.Errorf("no %q on the terminal:\n%q", want, screen)
		}
	}
	if n := strings.Count(screen, "\x1b[H"); n != 2 {
		t.Errorf("%d redraws for 2 refreshes", n)
	}
}
