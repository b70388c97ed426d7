package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/proc"
)

// guidePath is the getting-started guide TestGettingStartedGuide follows.
const guidePath = "../../docs/getting-started.md"

// The guide's blocks name what a reader has; the test has its own. Each is
// replaced in the commands and in the output they show (see the comment at
// the top of the guide):
//   - guidePort, the frontend's port, by a free port;
//   - guideDemoBackend, where the .deb installs the demo backend, by the one
//     this suite built;
//   - shoal itself is found on PATH, which starts with the suite's binaries.
const (
	guidePort        = "8443"
	guideDemoBackend = "/usr/lib/shoal/demo-backend"
)

// guideStep is one command of a guide block and the output lines it shows.
type guideStep struct {
	line int    // the command's line in the guide
	cmd  string // as shown, without the prompt, continuation lines and heredoc included
	want []string
}

// TestGettingStartedGuide follows docs/getting-started.md as a reader would:
// every ```console block preceded by <!-- guide-test --> runs, command by
// command in order, in one fresh directory, with the real shoal, HAProxy,
// demo-backend, openssl and curl. Every command must exit 0, and every
// output line the guide shows must be printed by its command, in order (the
// command may print more). Times, pids, ports, versions and counts vary from
// run to run, so a shown word that holds a digit stands for any one or more
// words; the other words must be equal, in order (runs of spaces count as
// one). A line "…" marks
// output the guide leaves out. What a shown line
// cannot pin down the commands check themselves: curl -f fails on an HTTP
// error, --cacert on a certificate that is not the guide's.
func TestGettingStartedGuide(t *testing.T) {
	parallel(t)
	text, err := os.ReadFile(guidePath)
	if err != nil {
		t.Fatal(err)
	}
	steps, err := guideSteps(string(text))
	if err != nil {
		t.Fatalf("%s: %v", guidePath, err)
	}
	// The guide goes from install to a scaled group and back; a marker
	// lost in an edit must not leave a test that runs nothing.
	if len(steps) < 10 {
		t.Fatalf("%s: %d guide-test commands, want the whole guide (at least 10)", guidePath, len(steps))
	}

	dir := t.TempDir()
	port := strconv.Itoa(freePort(t))
	subst := strings.NewReplacer(guidePort, port, guideDemoBackend, filepath.Join(binDir, "demo-backend"))
	env := append(os.Environ(), "PATH="+binDir+":"+os.Getenv("PATH"))
	t.Cleanup(func() { stopGuideProcesses(t, dir, env) })

	for _, s := range steps {
		cmdText := subst.Replace(s.cmd)
		t.Logf("%s:%d: $ %s", filepath.Base(guidePath), s.line, cmdText)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		c := exec.CommandContext(ctx, "bash", "-e", "-o", "pipefail", "-c", cmdText)
		c.Dir, c.Env = dir, env
		// A command the guide sends to the background (shoal serve &)
		// holds no pipe of ours: it writes to its own log file.
		c.WaitDelay = 5 * time.Second
		out, err := c.CombinedOutput()
		cancel()
		t.Logf("%s", out)
		if err != nil {
			t.Fatalf("%s:%d: `%s`: %v\n%s", guidePath, s.line, firstLine(s.cmd), err, out)
		}
		got := strings.Split(string(out), "\n")
		for _, w := range s.want {
			w = subst.Replace(w)
			i := slices.IndexFunc(got, func(g string) bool { return guideLineMatches(w, g) })
			if i < 0 {
				t.Fatalf("%s:%d: `%s` did not print, after what it printed before it:\n  %s\ngot:\n%s", guidePath, s.line, firstLine(s.cmd), w, out)
			}
			got = got[i+1:]
		}
	}
}

// guideSteps parses the guide's marked ```console blocks into commands:
// a line "$ CMD" starts one, a trailing backslash continues it, a heredoc
// (<<'EOF') takes the lines up to its terminator, and the lines after it up
// to the next "$ " are the output it shows (blank ones, and a line "…"
// marking output left out, ignored).
func guideSteps(md string) ([]guideStep, error) {
	lines := strings.Split(md, "\n")
	var steps []guideStep
	heredoc := regexp.MustCompile(`<<-?\s*'?"?([A-Za-z_]+)'?"?`)
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "<!-- guide-test -->" {
			continue
		}
		i++
		if i >= len(lines) || lines[i] != "```console" {
			return nil, fmt.Errorf("line %d: <!-- guide-test --> must come right before a ```console block", i)
		}
		var cur *guideStep
		for i++; ; i++ {
			if i >= len(lines) {
				return nil, errors.New("a ```console block does not end")
			}
			l := lines[i]
			if l == "```" {
				break
			}
			cmd, isCmd := strings.CutPrefix(l, "$ ")
			if !isCmd {
				if cur == nil {
					return nil, fmt.Errorf("line %d: output before the block's first command", i+1)
				}
				// "…" stands for output the guide leaves out.
				if t := strings.TrimSpace(l); t != "" && t != "…" {
					cur.want = append(cur.want, l)
				}
				continue
			}
			steps = append(steps, guideStep{line: i + 1})
			cur = &steps[len(steps)-1]
			for strings.HasSuffix(cmd, `\`) && i+1 < len(lines) {
				i++
				cmd += "\n" + lines[i]
			}
			if m := heredoc.FindStringSubmatch(cmd); m != nil {
				for {
					i++
					if i >= len(lines) || lines[i] == "```" {
						return nil, fmt.Errorf("line %d: heredoc %s does not end", cur.line, m[1])
					}
					cmd += "\n" + lines[i]
					if lines[i] == m[1] {
						break
					}
				}
			}
			cur.cmd = cmd
		}
	}
	return steps, nil
}

// guideLineMatches says whether got is the line want shows: the same words
// in order, where a word of want that holds a digit stands for one or more
// words (a check's "L7OK 200" may read "L7OK 200 19ms").
func guideLineMatches(want, got string) bool {
	var re strings.Builder
	re.WriteString(`^\s*`)
	for i, w := range strings.Fields(want) {
		if i > 0 {
			re.WriteString(`\s+`)
		}
		if strings.ContainsAny(w, "0123456789") {
			re.WriteString(`\S+(?:\s+\S+)*?`)
		} else {
			re.WriteString(regexp.QuoteMeta(w))
		}
	}
	re.WriteString(`\s*$`)
	return regexp.MustCompile(re.String()).MatchString(got)
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// stopGuideProcesses stops what the guide started in dir if its last step
// did not (a step failed): first as the guide would, with shoal stop, then
// by force whatever is left: shoal serve (it runs in dir), HAProxy (in
// dir's state directory) and the instances (they carry its marker).
func stopGuideProcesses(t *testing.T, dir string, env []string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, filepath.Join(binDir, "shoal"), "stop")
	c.Dir, c.Env = dir, env
	// Nothing to stop is the usual case: the guide's last step stopped it.
	out, err := c.CombinedOutput()
	t.Logf("cleanup: shoal stop: %v: %s", err, out)
	marker := "SHOAL_STATE_DIR=" + filepath.Join(dir, ".shoal")
	entries, _ := os.ReadDir("/proc")
	for _, d := range entries {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cwd, _ := os.Readlink(filepath.Join("/proc", d.Name(), "cwd"))
		env, _ := proc.Environ(pid)
		if cwd == dir || strings.HasPrefix(cwd, dir+"/") || slices.Contains(env, marker) {
			cmdline, _ := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
			t.Errorf("the guide left pid %d (%s) running after shoal stop; killing it", pid, bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
