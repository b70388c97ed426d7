// Package pkgtest installs shoal's Debian package (make package) into a
// throwaway Debian root, runs it as its systemd unit would, serves one request
// through HAProxy to an instance, and purges it (TestDebianPackage); and
// follows the getting-started guide from the package's install
// (TestGettingStartedOnPackage). Never into this machine: every apt, dpkg and
// shoal command runs chrooted in the root the test unpacked.
package pkgtest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The Debian root the package goes into: minbase bookworm with haproxy,
// made by debootstrap once (about a minute) and kept as a tarball outside the
// repository; each run unpacks it afresh (about 2 s).
const (
	suite        = "bookworm"
	rootIncludes = "haproxy,passwd"
)

func rootCache() string {
	if p := os.Getenv("SHOAL_TEST_ROOT_CACHE"); p != "" {
		return p
	}
	return "/var/cache/shoal-test/" + suite + "-minbase-haproxy.tar.gz"
}

// needs skips (or, under CI, fails) when the test cannot run here.
func needs(t *testing.T) {
	t.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "not root"
	}
	for _, tool := range []string{"dpkg-deb", "debootstrap", "unshare", "chroot", "file", "make"} {
		if _, err := exec.LookPath(tool); err != nil && why == "" {
			why = tool + " not found (make test-deps)"
		}
	}
	if why == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("package test cannot run: %s", why)
	}
	t.Skipf("package test needs root, dpkg-deb and debootstrap: %s", why)
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// debianRoot unpacks the cached root into a new directory, making the cache
// first when there is none.
func debianRoot(t *testing.T) string {
	cache := rootCache()
	// The tests that need a root run in parallel: one makes the cache.
	madeRoot.Do(func() { madeRoot.err = makeRootCache(t, cache) })
	if madeRoot.err != nil {
		t.Fatal(madeRoot.err)
	}
	root := filepath.Join(t.TempDir(), "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "tar", "-C", root, "-xzf", cache)
	return root
}

var madeRoot struct {
	sync.Once
	err error
}

// makeRootCache makes the cached root with debootstrap unless a sound one
// exists (a damaged one, as two writers once left, is made again). It writes
// a temporary file of its own beside the cache and renames it, so a test
// process that reads the cache never sees half of one another writes.
func makeRootCache(t *testing.T, cache string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := os.Stat(cache); err == nil {
		out, err := exec.CommandContext(ctx, "gzip", "-t", cache).CombinedOutput()
		if err == nil {
			return nil
		}
		t.Logf("%s is damaged (gzip -t: %v: %s): making it again with debootstrap (about a minute)", cache, err, bytes.TrimSpace(out))
	} else {
		t.Logf("no %s: making it with debootstrap (about a minute)", cache)
	}
	build := filepath.Join(t.TempDir(), "root")
	if out, err := exec.CommandContext(ctx, "debootstrap", "--variant=minbase", "--include="+rootIncludes, suite, build, mirror()).CombinedOutput(); err != nil {
		return fmt.Errorf("debootstrap: %v\n%s", err, out)
	}
	if err := os.MkdirAll(filepath.Dir(cache), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(cache), filepath.Base(cache)+".*.tmp")
	if err != nil {
		return err
	}
	tmp.Close()
	defer os.Remove(tmp.Name()) // after a successful rename there is none
	if out, err := exec.CommandContext(ctx, "tar", "-C", build, "-czf", tmp.Name(), ".").CombinedOutput(); err != nil {
		return fmt.Errorf("tar of the root: %v\n%s", err, out)
	}
	return os.Rename(tmp.Name(), cache)
}

// mirror is the Debian mirror apt uses here (deb822 sources), so debootstrap
// goes where this machine is known to reach.
func mirror() string {
	b, _ := os.ReadFile("/etc/apt/sources.list.d/debian.sources")
	if m := regexp.MustCompile(`(?m)^URIs:\s*(\S+/debian)\s*$`).FindSubmatch(b); m != nil {
		return string(m[1])
	}
	return "http://deb.debian.org/debian"
}

// unit is what the test reads from the installed systemd unit.
type unit struct {
	user, group           string
	execStartPre          []string
	execStart, execReload []string
	ambient, bounding     []string
}

func readUnit(t *testing.T, path string) unit {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var u unit
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if !ok || strings.HasPrefix(k, "#") {
			continue
		}
		switch k {
		case "User":
			u.user = v
		case "Group":
			u.group = v
		case "ExecStartPre":
			u.execStartPre = strings.Fields(v)
		case "ExecStart":
			u.execStart = strings.Fields(v)
		case "ExecReload":
			u.execReload = strings.Fields(v)
		case "AmbientCapabilities":
			u.ambient = strings.Fields(v)
		case "CapabilityBoundingSet":
			u.bounding = strings.Fields(v)
		}
	}
	if u.user == "" || len(u.execStart) == 0 || len(u.execStartPre) == 0 || len(u.execReload) == 0 {
		t.Fatalf("%s: want User=, ExecStartPre=, ExecStart= and ExecReload=; read %+v", path, u)
	}
	return u
}

// setprivCaps turns the unit's CAP_NET_BIND_SERVICE into setpriv's
// -all,+net_bind_service.
func setprivCaps(caps []string) string {
	s := "-all"
	for _, c := range caps {
		s += ",+" + strings.ToLower(strings.TrimPrefix(c, "CAP_"))
	}
	return s
}

// asUnit is the command that runs argv in root as the unit would: its user and
// group, only its capabilities (ambient ones inherited by HAProxy), no new
// privileges, systemd's default PATH, in a PID namespace with its own /proc
// (so everything started dies with it) and a mount namespace (so the mount
// goes away with it).
func asUnit(root string, u unit, argv []string) *exec.Cmd {
	args := []string{"--mount", "--pid", "--fork", "--kill-child", "--mount-proc=" + filepath.Join(root, "proc"),
		"chroot", root, "setpriv", "--reuid=" + u.user, "--regid=" + u.group, "--init-groups", "--no-new-privs",
		"--inh-caps=" + setprivCaps(u.ambient), "--ambient-caps=" + setprivCaps(u.ambient),
		"--bounding-set=" + setprivCaps(u.bounding), "--"}
	cmd := exec.Command("unshare", append(args, argv...)...)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"}
	return cmd
}

// lowPort is a free port below 1024 on 127.0.0.1: binding it needs the
// unit's CAP_NET_BIND_SERVICE, in shoal's HAProxy.
func lowPort(t *testing.T) int {
	for p := 700 + int(time.Now().UnixNano()%200); p < 1024; p++ {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err == nil {
			l.Close()
			return p
		}
	}
	t.Fatal("no free port in 700-1023 on 127.0.0.1")
	return 0
}

func TestDebianPackage(t *testing.T) {
	needs(t)
	t.Parallel() // its own root; the package is built once
	start := time.Now()
	deb, version := buildPackage(t)
	t.Logf("built %s (%s)", deb, time.Since(start).Round(time.Millisecond))

	root := debianRoot(t)
	chroot := func(args ...string) string { return run(t, "chroot", append([]string{root}, args...)...) }
	if err := copyFile(deb, filepath.Join(root, "tmp/shoal.deb")); err != nil {
		t.Fatal(err)
	}
	chroot("dpkg", "-i", "/tmp/shoal.deb")
	files := strings.Fields(chroot("dpkg-query", "-L", "shoal"))
	t.Logf("installed into %s (%s)", root, time.Since(start).Round(time.Millisecond))

	// Installed: the user, its state directory, the config readable by shoal only.
	if got := chroot("getent", "passwd", "shoal"); !strings.Contains(got, ":/var/lib/shoal:/usr/sbin/nologin") {
		t.Errorf("user shoal: %q", got)
	}
	if got := chroot("stat", "-c", "%U:%G %a", "/var/lib/shoal", "/etc/shoal", "/etc/shoal/shoal.yaml"); got != "shoal:shoal 700\nroot:shoal 750\nroot:shoal 640\n" {
		t.Errorf("state dir and config owners and modes:\n%s", got)
	}
	if got := chroot("dpkg-query", "-W", "-f", "${Conffiles}", "shoal"); !strings.Contains(got, "/etc/shoal/shoal.yaml") {
		t.Errorf("/etc/shoal/shoal.yaml is not a conffile: %q", got)
	}
	for _, f := range []string{"/usr/share/man/man1/shoal.1.gz", "/usr/share/bash-completion/completions/shoal",
		"/usr/share/zsh/vendor-completions/_shoal", "/usr/share/fish/vendor_completions.d/shoal.fish"} {
		if !contains(files, f) {
			t.Errorf("the package has no %s", f)
		}
	}

	u := readUnit(t, filepath.Join(root, "usr/lib/systemd/system/shoal.service"))
	if fmt.Sprint(u.ambient) != "[CAP_NET_BIND_SERVICE]" || fmt.Sprint(u.bounding) != "[CAP_NET_BIND_SERVICE]" {
		t.Errorf("unit capabilities: ambient %v, bounding %v; want CAP_NET_BIND_SERVICE alone", u.ambient, u.bounding)
	}

	// The stamped version, and the root's HAProxy, as the unit's user.
	if b, err := asUnit(root, u, []string{"/usr/bin/shoal", "version"}).CombinedOutput(); err != nil ||
		!strings.Contains(string(b), "shoal    "+version+"\n") || !regexp.MustCompile(`(?m)^haproxy  2\.6\.`).Match(b) {
		t.Errorf("shoal version in the root: %v\n%s", err, b)
	}

	// ExecStartPre: the default config validates. Then listen on a low port,
	// which the unit's one capability allows.
	if b, err := asUnit(root, u, u.execStartPre).CombinedOutput(); err != nil {
		t.Fatalf("ExecStartPre %v on the default config: %v\n%s", u.execStartPre, err, b)
	}
	port := lowPort(t)
	cfgPath := filepath.Join(root, "etc/shoal/shoal.yaml")
	cfg, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	cfg = regexp.MustCompile(`(?m)^listen: .*$`).ReplaceAll(cfg, []byte("listen: 127.0.0.1:"+strconv.Itoa(port)))
	if err := os.WriteFile(cfgPath, cfg, 0o640); err != nil {
		t.Fatal(err)
	}

	serve := asUnit(root, u, u.execStart)
	var logs bytes.Buffer
	serve.Stdout, serve.Stderr = &logs, &logs
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- serve.Wait() }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			serve.Process.Signal(syscall.SIGKILL) // --kill-child: the PID namespace goes with it
			<-exited
		}
		if t.Failed() {
			t.Logf("shoal serve's output:\n%s", logs.String())
		}
	})

	// One request through HAProxy on the low port to the demo backend.
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	var resp *http.Response
	for deadline := time.Now().Add(60 * time.Second); ; {
		resp, err = http.Get(url)
		if err == nil && resp.StatusCode == http.StatusOK {
			break
		}
		if err == nil {
			resp.Body.Close()
		}
		select {
		case err := <-exited:
			stopped = true
			t.Fatalf("shoal serve exited: %v\n%s", err, logs.String())
		case <-time.After(250 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no 200 from %s in 60s (last: %v)", url, err)
		}
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Header.Get("X-Instance") == "" || len(body) == 0 {
		t.Errorf("GET %s: no instance answered (headers %v, %d bytes)", url, resp.Header, len(body))
	}
	t.Logf("GET %s: %s from %s (%s)", url, resp.Status, resp.Header.Get("X-Instance"), time.Since(start).Round(time.Millisecond))

	// HAProxy bound the port as the unit's user, not as root.
	if uids := procUsers(t, root, "haproxy"); len(uids) == 0 {
		t.Error("no haproxy process in the root")
	} else {
		for _, uid := range uids {
			if want := strings.TrimSpace(chroot("id", "-u", u.user)); uid != want {
				t.Errorf("haproxy runs as uid %s, want %s (%s)", uid, want, u.user)
			}
		}
	}

	// ExecReload answers, then shoal stop stops shoal, HAProxy and the instance.
	if b, err := asUnit(root, u, u.execReload).CombinedOutput(); err != nil {
		t.Errorf("ExecReload %v: %v\n%s", u.execReload, err, b)
	}
	if b, err := asUnit(root, u, []string{"/usr/bin/shoal", "stop", "-c", "/etc/shoal/shoal.yaml"}).CombinedOutput(); err != nil {
		t.Errorf("shoal stop: %v\n%s", err, b)
	}
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			t.Errorf("shoal serve after shoal stop: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("shoal serve still running 60s after shoal stop")
	}

	// Purge leaves nothing: no file of the package (directories shared with
	// other packages stay), no state, no config, no user or group.
	chroot("dpkg", "--purge", "shoal")
	for _, f := range files {
		if f == "/." {
			continue
		}
		if _, err := os.Lstat(filepath.Join(root, f)); err == nil {
			if exec.Command("chroot", root, "dpkg-query", "-S", f).Run() != nil {
				t.Errorf("%s is left after purge", f)
			}
		}
	}
	for _, f := range []string{"/etc/shoal", "/var/lib/shoal"} {
		if _, err := os.Lstat(filepath.Join(root, f)); err == nil {
			t.Errorf("%s is left after purge", f)
		}
	}
	for _, db := range []string{"passwd", "group"} {
		if b, err := exec.Command("chroot", root, "getent", db, "shoal").Output(); err == nil {
			t.Errorf("%s shoal is left after purge: %s", db, b)
		}
	}
	t.Logf("purged (%s)", time.Since(start).Round(time.Millisecond))
}

// buildPackage runs make package once for the tests of this process and
// returns the .deb's path and version.
func buildPackage(t *testing.T) (deb, version string) {
	t.Helper()
	built.Do(func() {
		// A guard against a hang, not a timing: the static build has a
		// cache of its own (CGO off, -trimpath), and on a machine whose
		// cache is cold it compiles every dependency, which took over 5
		// minutes on 2 cores beside the other packages' tests. 9 leaves the
		// tests of the package time within go test's -timeout 12m.
		ctx, cancel := context.WithTimeout(context.Background(), 9*time.Minute)
		defer cancel()
		// make -s package prints the package's path last.
		out, err := exec.CommandContext(ctx, "make", "-s", "-C", "../..", "package").CombinedOutput()
		if err != nil {
			built.err = fmt.Errorf("make package: %v\n%s", err, out)
			return
		}
		f := strings.Fields(string(out))
		if len(f) == 0 || !strings.HasSuffix(f[len(f)-1], "_amd64.deb") {
			built.err = fmt.Errorf("make package printed %q, not a .deb", out)
			return
		}
		built.deb = filepath.Join("../..", f[len(f)-1])
		v, err := exec.CommandContext(ctx, "dpkg-deb", "-f", built.deb, "Version").CombinedOutput()
		if err != nil {
			built.err = fmt.Errorf("dpkg-deb -f %s Version: %v\n%s", built.deb, err, v)
			return
		}
		built.version = strings.TrimSpace(string(v))
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.deb, built.version
}

// built is the package buildPackage made.
var built struct {
	sync.Once
	deb, version string
	err          error
}

// procUsers is the real uid of each process named name whose root is root.
func procUsers(t *testing.T, root, name string) []string {
	t.Helper()
	pids, _ := filepath.Glob("/proc/[0-9]*")
	var uids []string
	for _, p := range pids {
		if r, err := os.Readlink(p + "/root"); err != nil || r != root {
			continue
		}
		status, err := os.ReadFile(p + "/status")
		if err != nil {
			continue
		}
		var comm, uid string
		for _, line := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(line, "Name:"); ok {
				comm = strings.TrimSpace(v)
			}
			if v, ok := strings.CutPrefix(line, "Uid:"); ok {
				if f := strings.Fields(v); len(f) > 0 {
					uid = f[0]
				}
			}
		}
		if comm == name {
			uids = append(uids, uid)
		}
	}
	return uids
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o644)
}

// TestDistTarball: make dist holds what a non-Debian host needs: the static
// binary, man pages, completions, examples, the docs and the LICENSE, which
// the .deb carries as its copyright file.
func TestDistTarball(t *testing.T) {
	needs(t)
	t.Parallel()
	deb, _ := buildPackage(t) // the static binaries make dist reuses
	if got := run(t, "dpkg-deb", "-c", deb); !strings.Contains(got, "./usr/share/doc/shoal/copyright") {
		t.Errorf("the .deb has no copyright file:\n%s", got)
	}
	out := strings.Fields(run(t, "make", "-s", "-C", "../..", "dist"))
	tarball := filepath.Join("../..", out[len(out)-1])
	if !strings.HasSuffix(tarball, "_linux_amd64.tar.gz") {
		t.Fatalf("make dist printed %q, not a tarball", out)
	}
	list := run(t, "tar", "-tzf", tarball)
	for _, want := range []string{"/shoal", "/LICENSE", "/README.md", "/docs/getting-started.md", "/docs/config.md",
		"/man1/shoal.1", "/completions/shoal.bash", "/examples/"} {
		if !strings.Contains(list, want+"\n") {
			t.Errorf("%s lacks %s", tarball, want)
		}
	}
}
