package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/guide"
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

// TestGettingStartedGuide follows docs/getting-started.md as a reader would:
// every ```console block marked <!-- guide-test --> (internal/guide) runs,
// command by command in order, in one fresh directory, with the real shoal,
// HAProxy, demo-backend, openssl and curl. Every command must exit 0, and
// every output line the guide shows must be printed by its command, in order
// (the command may print more; guide.LineMatches: a shown word that holds a
// digit stands for any words). What a shown line cannot pin down the commands
// check themselves: curl -f fails on an HTTP error, --cacert on a certificate
// that is not the guide's. The blocks marked guide-test package install the
// .deb: test/package's TestGettingStartedOnPackage runs them, with the rest
// of the guide, in a fresh Debian root.
func TestGettingStartedGuide(t *testing.T) {
	parallel(t)
	text, err := os.ReadFile(guidePath)
	if err != nil {
		t.Fatal(err)
	}
	all, err := guide.Parse(string(text))
	if err != nil {
		t.Fatalf("%s: %v", guidePath, err)
	}
	steps := slices.DeleteFunc(all, func(s guide.Step) bool { return s.Package })
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
		cmdText := subst.Replace(s.Cmd)
		t.Logf("%s:%d: $ %s", filepath.Base(guidePath), s.Line, cmdText)
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
			t.Fatalf("%s:%d: `%s`: %v\n%s", guidePath, s.Line, s.Title(), err, out)
		}
		if w, missing := guide.Missing(s.Want, string(out), subst.Replace); missing {
			t.Fatalf("%s:%d: `%s` did not print, after what it printed before it:\n  %s\ngot:\n%s", guidePath, s.Line, s.Title(), w, out)
		}
	}
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
