package pkgtest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/guide"
	"github.com/shoal-lb/shoal/internal/testport"
)

// guidePath is the getting-started guide TestGettingStartedOnPackage follows.
const guidePath = "../../docs/getting-started.md"

// The guide's reader: a user with sudo on a fresh Debian 12, working in
// ~/shoal-guide (the guide's "mkdir shoal-guide && cd shoal-guide"), with the
// .deb copied to ~.
const (
	guideUser = "guide"
	guideHome = "/home/" + guideUser
	guideDir  = guideHome + "/shoal-guide"
	guidePort = "8443" // the guide's frontend port, replaced by a free one
)

// archiveCache keeps the .debs apt downloads for the guide's apt-get install
// (curl, openssl) between runs, beside the cached root: a second run
// downloads nothing.
func archiveCache() string {
	return filepath.Join(filepath.Dir(rootCache()), suite+"-archives")
}

// TestGettingStartedOnPackage follows docs/getting-started.md as its reader
// would, from the .deb: in a fresh Debian 12 root (debianRoot) with a user
// guide, it runs every tested block of the guide (internal/guide) in order,
// the ones marked guide-test package (sudo apt-get install ./shoal_*.deb curl
// openssl) as root in ~ (sudo is all they need, and a minbase root has none:
// the test drops the word), the others as guide in ~/shoal-guide, with the
// installed /usr/bin/shoal, /usr/lib/shoal/demo-backend, the root's HAProxy,
// curl and openssl. Each command must exit 0 and print the lines the guide
// shows (guide.Missing), as in test/e2e's TestGettingStartedGuide, which runs
// the same blocks, except the package ones, on the suite's binaries.
//
// Everything runs in one PID and mount namespace (a holder process, each
// command entered with nsenter), so what the guide starts in the background
// dies with the holder however the test ends. The network is this machine's:
// the frontend's port 8443 is replaced by a free one.
//
// It logs each command's wall time and the total from the apt-get install to
// the last block passing: the figure the guide's closing note quotes.
func TestGettingStartedOnPackage(t *testing.T) {
	needs(t)
	t.Parallel() // its own root; the package is built once
	text, err := os.ReadFile(guidePath)
	if err != nil {
		t.Fatal(err)
	}
	steps, err := guide.Parse(string(text))
	if err != nil {
		t.Fatalf("%s: %v", guidePath, err)
	}
	if len(steps) < 11 || !steps[0].Package {
		t.Fatalf("%s: %d guide-test commands, the first package=%v; want the whole guide, starting with the install", guidePath, len(steps), len(steps) > 0 && steps[0].Package)
	}

	deb, version := buildPackage(t)
	t.Logf("built %s (%s)", deb, version)
	root := debianRoot(t)
	chroot := func(args ...string) string { return run(t, "chroot", append([]string{root}, args...)...) }

	// The machine as a fresh Debian 12 install leaves it: /etc/hosts
	// (debootstrap writes none), a user, and the .deb copied to its home.
	if err := os.WriteFile(filepath.Join(root, "etc/hosts"), []byte("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	chroot("useradd", "--create-home", "--shell", "/bin/bash", guideUser)
	if err := copyFile(deb, filepath.Join(root, guideHome, filepath.Base(deb))); err != nil {
		t.Fatal(err)
	}
	chroot("mkdir", guideDir)
	chroot("chown", "-R", guideUser+":"+guideUser, guideHome)
	archives := filepath.Join(root, "var/cache/apt/archives")
	copyDebs(t, archiveCache(), archives)

	holder := startHolder(t, root)
	port := strconv.Itoa(freePort(t))
	subst := strings.NewReplacer(guidePort, port)
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(root, guideDir, "shoal.log"))
			t.Logf("shoal.log:\n%s", b)
		}
	})

	start := time.Now()
	for _, s := range steps {
		cmdText := subst.Replace(s.Cmd)
		dir, user := guideDir, guideUser
		if s.Package {
			cmdText = strings.TrimPrefix(cmdText, "sudo ")
			dir, user = guideHome, "root"
		}
		t.Logf("%s:%d: $ %s", filepath.Base(guidePath), s.Line, cmdText)
		stepStart := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		out, err := holder.command(ctx, dir, user, cmdText).CombinedOutput()
		cancel()
		took := time.Since(stepStart)
		t.Logf("%s", out)
		if err != nil {
			t.Fatalf("%s:%d: `%s`: %v\n%s", guidePath, s.Line, s.Title(), err, out)
		}
		if w, missing := guide.Missing(s.Want, string(out), subst.Replace); missing {
			t.Fatalf("%s:%d: `%s` did not print, after what it printed before it:\n  %s\ngot:\n%s", guidePath, s.Line, s.Title(), w, out)
		}
		t.Logf("%s:%d: passed in %s (%s since the install began)", filepath.Base(guidePath), s.Line, took.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
		if s.Package {
			copyDebs(t, archives, archiveCache())
		}
	}
	t.Logf("the guide on shoal %s: from apt-get install to its last block passing in %s", version, time.Since(start).Round(time.Second))

	// The guide's last step stopped everything it started.
	if left := holder.processes(t); len(left) > 0 {
		t.Errorf("after the guide's shoal stop, still running in the root: %s", strings.Join(left, "; "))
	}
}

// holder is a process in its own PID and mount namespaces, chrooted in a
// Debian root, which the guide's commands enter: killing it (the namespace's
// init) kills all they started.
type holder struct {
	root string
	pid  int // the holder inside its namespace's parent: nsenter's target
}

func startHolder(t *testing.T, root string) *holder {
	t.Helper()
	cmd := exec.Command("unshare", "--mount", "--pid", "--fork", "--kill-child", "--mount-proc="+filepath.Join(root, "proc"),
		"chroot", root, "sleep", "infinity")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGKILL) // --kill-child: the namespace's init, and so all in it, go too
		<-exited
	})
	// unshare forks sleep, the namespace's init; its pid here is nsenter's target.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "task", strconv.Itoa(cmd.Process.Pid), "children"))
		if f := strings.Fields(string(b)); len(f) == 1 {
			pid, _ := strconv.Atoi(f[0])
			if r, _ := os.Readlink(filepath.Join("/proc", f[0], "root")); r == root {
				h := &holder{root: root, pid: pid}
				// A machine has /dev/pts (apt logs its terminal there); the
				// mount is the namespace's and goes with it.
				pts := filepath.Join(root, "dev/pts")
				if err := os.MkdirAll(pts, 0o755); err != nil {
					t.Fatal(err)
				}
				run(t, "nsenter", "--target="+f[0], "--mount", "--", "mount", "-t", "devpts", "-o", "newinstance,ptmxmode=0666,mode=620", "devpts", pts)
				return h
			}
		}
	}
	t.Fatal("the root's holder process did not start in 10s")
	return nil
}

// command runs cmdText with bash -e -o pipefail in dir, in the holder's
// namespaces and root, as user with a login's environment.
func (h *holder) command(ctx context.Context, dir, user, cmdText string) *exec.Cmd {
	home := "/root"
	if user != "root" {
		home = "/home/" + user
	}
	c := exec.CommandContext(ctx, "nsenter", "--target="+strconv.Itoa(h.pid), "--mount", "--pid", "--root",
		"--wd="+filepath.Join(h.root, dir), "--",
		"setpriv", "--reuid="+user, "--regid="+user, "--init-groups", "--",
		"env", "-i", "HOME="+home, "USER="+user, "LOGNAME="+user, "SHELL=/bin/bash", "LANG=C.UTF-8",
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"bash", "-e", "-o", "pipefail", "-c", cmdText)
	// apt-get asks before it installs what the .deb depends on; the reader says yes.
	c.Stdin = strings.NewReader("y\n")
	// A command the guide sends to the background (shoal serve &) holds no
	// pipe of ours: it writes to its own log file.
	c.WaitDelay = 5 * time.Second
	return c
}

// processes lists what runs in the holder's root besides the holder.
func (h *holder) processes(t *testing.T) []string {
	t.Helper()
	pids, _ := filepath.Glob("/proc/[0-9]*")
	var left []string
	sawHolder := false
	for _, p := range pids {
		if r, err := os.Readlink(p + "/root"); err != nil || r != h.root {
			continue
		}
		if p == "/proc/"+strconv.Itoa(h.pid) {
			sawHolder = true
			continue
		}
		cmdline, _ := os.ReadFile(p + "/cmdline")
		left = append(left, strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " ")))
	}
	// Not finding the holder would mean this scan cannot see the root's processes.
	if !sawHolder {
		t.Errorf("no process found in %s, not even the holder (pid %d)", h.root, h.pid)
	}
	return left
}

// copyDebs copies the .debs in from that to is not there.
func copyDebs(t *testing.T, from, to string) {
	t.Helper()
	if err := os.MkdirAll(to, 0o755); err != nil {
		t.Fatal(err)
	}
	debs, _ := filepath.Glob(filepath.Join(from, "*.deb"))
	for _, d := range debs {
		dst := filepath.Join(to, filepath.Base(d))
		if _, err := os.Stat(dst); err == nil {
			continue
		}
		if err := copyFile(d, dst); err != nil {
			t.Fatal(err)
		}
	}
}

// freePort is a port on 127.0.0.1 free now, outside the ephemeral range
// (testport): make test runs the e2e suite beside this test.
func freePort(t *testing.T) int {
	t.Helper()
	return testport.Free(t)
}
