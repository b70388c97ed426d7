// Package testcontainer is the real container parts of tests: podman, a
// registry (Debian's docker-registry) on 127.0.0.1 with its own storage,
// and an image of the demo backend built in the test (FROM scratch with
// the static binary) and pushed there. No registry outside this machine is
// reached. Every container a test's shoal starts carries the owner label,
// and Sweep removes those (and the test's images) even when the test fails.
package testcontainer

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/testdep"
	"github.com/shoal-lb/shoal/internal/testport"
)

// Podman returns podman's path, skipping t (failing it in CI) without it,
// once it is known to start a container on this machine (see usable).
func Podman(t testing.TB) string {
	t.Helper()
	p := testdep.Command(t, "podman", "podman")
	if err := usable(); err != nil {
		t.Fatalf("podman cannot run containers here: %v", err)
	}
	return p
}

// usable checks once that podman starts a container; on a machine where
// it cannot as installed, it tries again with a containers.conf of its own,
// made for the two limits of sandboxes (a container of a container):
// ulimits it may not raise (no CAP_SYS_RESOURCE: the defaults are set to
// this process's own), and a cgroup v2 hierarchy mounted beside v1 with a
// controller in it, which crun refuses ("cgroups in hybrid mode not
// supported"): crun then runs through a wrapper that unmounts the v2
// hierarchy in a mount namespace of its own (crunWrapper). CONTAINERS_CONF
// is set for this process and what it starts (shoal serve, and the test
// hosts' sshd: see testhost).
var usable = sync.OnceValue(func() error {
	if err := tryRun(); err == nil {
		return nil
	}
	dir, err := os.MkdirTemp("", "shoal-testcontainer")
	if err != nil {
		return err
	}
	var nofile, nproc [2]uint64
	if err := limits(&nofile, &nproc); err != nil {
		return err
	}
	wrap := filepath.Join(dir, "crun-unified-off")
	if err := os.WriteFile(wrap, []byte(crunWrapper), 0o755); err != nil {
		return err
	}
	conf := fmt.Sprintf("[containers]\ndefault_ulimits = [\"nofile=%d:%d\", \"nproc=%d:%d\"]\n[engine]\nruntime = \"crunwrap\"\n[engine.runtimes]\ncrunwrap = [%q]\n",
		nofile[0], nofile[1], min(nproc[0], 32768), min(nproc[1], 32768), wrap)
	path := filepath.Join(dir, "containers.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return err
	}
	os.Setenv("CONTAINERS_CONF", path)
	return tryRun()
})

// crunWrapper runs crun in a mount namespace of its own where
// /sys/fs/cgroup holds the cgroup v1 hierarchies only: the v2 one
// unmounted, or, where /sys is a fresh sysfs (`ip netns exec` mounts one:
// the test hosts of package testhost), the v1 hierarchies mounted again.
const crunWrapper = `#!/bin/sh
exec unshare -m sh -c '
if [ "$(stat -f -c %T /sys/fs/cgroup 2>/dev/null)" = tmpfs ]; then
	umount /sys/fs/cgroup/unified 2>/dev/null
else
	mount -t tmpfs cgroup /sys/fs/cgroup || exit 1
	for c in cpu cpuacct cpuset memory devices freezer blkio pids; do
		mkdir -p /sys/fs/cgroup/$c && mount -t cgroup -o $c cgroup /sys/fs/cgroup/$c || exit 1
	done
	mkdir -p /sys/fs/cgroup/systemd && mount -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd
fi
exec crun "$@"' crun "$@"
`

// tryRun runs a throwaway container of an empty image: podman import of
// an empty tarball, then a run that fails in the image (no program) or
// earlier (in the runtime, what matters here).
func tryRun() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "podman", "run", "--rm", "--network", "none", "--entrypoint", "/none", "scratch-probe-shoal:1").CombinedOutput()
	if err == nil {
		return nil
	}
	if bytes.Contains(out, []byte("/none")) && bytes.Contains(bytes.ToLower(out), []byte("not found")) {
		return nil // the runtime started it; the image has no program
	}
	if bytes.Contains(out, []byte("scratch-probe-shoal")) && !bytes.Contains(out, []byte("OCI")) {
		if e := importScratch(ctx); e != nil {
			return e
		}
		return tryRun()
	}
	return fmt.Errorf("podman run: %w: %s", err, bytes.TrimSpace(out))
}

// importScratch makes the probe's empty image from an empty tarball.
func importScratch(ctx context.Context) error {
	var tar [1024]byte // two zero blocks: an empty archive
	cmd := exec.CommandContext(ctx, "podman", "import", "-", "scratch-probe-shoal:1")
	cmd.Stdin = bytes.NewReader(tar[:])
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("podman import: %w: %s", err, out)
	}
	return nil
}

// limits reads this process's RLIMIT_NOFILE and RLIMIT_NPROC.
func limits(nofile, nproc *[2]uint64) error {
	b, err := os.ReadFile("/proc/self/limits")
	if err != nil {
		return err
	}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		var dst *[2]uint64
		switch {
		case strings.HasPrefix(line, "Max open files"):
			dst, f = nofile, f[3:]
		case strings.HasPrefix(line, "Max processes"):
			dst, f = nproc, f[2:]
		default:
			continue
		}
		for i := range 2 {
			if f[i] == "unlimited" {
				dst[i] = 1 << 20
			} else if _, err := fmt.Sscan(f[i], &dst[i]); err != nil {
				return fmt.Errorf("parse limits %q: %w", line, err)
			}
		}
	}
	return nil
}

// Registry is a docker-registry serving plain HTTP on 127.0.0.1 for one
// test, its storage in the test's temporary directory.
type Registry struct {
	// Addr is 127.0.0.1:PORT, the image references' registry part.
	Addr string
}

// StartRegistry starts a registry on 127.0.0.1; the test's cleanup stops
// it.
func StartRegistry(t testing.TB) *Registry {
	t.Helper()
	return StartRegistryOn(t, "127.0.0.1")
}

// StartRegistryOn starts a registry on ip, one of this machine's loopback
// addresses or a test host's link (testhost.Host.Peer: what that host
// reaches).
func StartRegistryOn(t testing.TB, ip string) *Registry {
	t.Helper()
	bin := testdep.Command(t, "docker-registry", "docker-registry")
	dir := t.TempDir()
	addr := net.JoinHostPort(ip, strconv.Itoa(testport.Free(t)))
	conf := fmt.Sprintf("version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s\n  delete:\n    enabled: true\nhttp:\n  addr: %s\n",
		filepath.Join(dir, "data"), addr)
	cfg := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	cmd := exec.Command(bin, "serve", cfg)
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return &Registry{Addr: addr}
			}
		}
		select {
		case <-done:
			t.Fatalf("docker-registry exited: %s", log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("docker-registry on %s did not answer in 15s: %v\n%s", addr, err, log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Ref is the reference of name:tag in r.
func (r *Registry) Ref(name, tag string) string { return r.Addr + "/" + name + ":" + tag }

// PushDemo builds an image holding only the static demo backend (its
// entrypoint; args --listen :PORT --name NAME), tags it ref in r and
// pushes it there, then removes it from podman's storage, so that shoal
// pulls it. The image's label "shoal.test" is tag and "shoal.test.registry"
// r's address, so that two tags are two images, and so are two tests'
// images of one tag: with podman's build cache they were one, and a test's
// rmi failed on the image another test's container ran.
func (r *Registry) PushDemo(t testing.TB, name, tag string) string {
	t.Helper()
	Podman(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "demo-backend")
	build := exec.Command("go", "build", "-o", bin, "github.com/shoal-lb/shoal/cmd/demo-backend")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build static demo-backend: %v\n%s", err, out)
	}
	file := fmt.Sprintf("FROM scratch\nCOPY demo-backend /demo-backend\nLABEL shoal.test=%q shoal.test.registry=%q\nENTRYPOINT [\"/demo-backend\"]\n", tag, r.Addr)
	if err := os.WriteFile(filepath.Join(dir, "Containerfile"), []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	ref := r.Ref(name, tag)
	run(t, "podman", "build", "--quiet", "--tag", ref, dir)
	run(t, "podman", "push", "--quiet", "--tls-verify=false", ref)
	run(t, "podman", "rmi", ref)
	return ref
}

// Exec runs a podman argv where the containers are and returns its
// stdout: Here, or Over a test host's SSH session (a test host's containers
// are seen only there: podman keeps their network namespaces in the mount
// namespace of the host's sshd, and podman ps elsewhere fails to join them).
type Exec func(argv ...string) ([]byte, error)

// Here runs argv on this machine.
func Here(argv ...string) ([]byte, error) {
	out, err := exec.Command(argv[0], argv[1:]...).Output()
	if ee, ok := err.(*exec.ExitError); ok {
		err = fmt.Errorf("%w: %s", err, bytes.TrimSpace(ee.Stderr))
	}
	return out, err
}

// Over runs argv on a test host with OpenSSH's client (its lab's key, the
// host key checked), every word quoted for the remote shell.
func Over(keyFile, knownHosts, user, addr string) Exec {
	return func(argv ...string) ([]byte, error) {
		q := make([]string, len(argv))
		for i, a := range argv {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, "ssh", "-i", keyFile, "-o", "UserKnownHostsFile="+knownHosts,
			"-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", user+"@"+addr, strings.Join(q, " ")).Output()
		if ee, ok := err.(*exec.ExitError); ok {
			err = fmt.Errorf("%w: %s", err, bytes.TrimSpace(ee.Stderr))
		}
		return out, err
	}
}

// Sweep removes, at t's cleanup, every container labelled with
// labelFilter (KEY=VALUE; running or not) and the images of r: nothing a
// test's shoal ran is left, whatever the test's outcome.
func Sweep(t testing.TB, r *Registry, labelFilter string) { SweepWith(t, Here, r, labelFilter) }

// SweepWith is Sweep with the containers' podman reached through run and
// every label filter to match (a test host's: its shoal.host too).
func SweepWith(t testing.TB, run Exec, r *Registry, labelFilters ...string) {
	t.Helper()
	t.Cleanup(func() {
		argv := []string{"podman", "ps", "--all", "--quiet"}
		for _, f := range labelFilters {
			argv = append(argv, "--filter", "label="+f)
		}
		out, err := run(argv...)
		if err != nil {
			t.Errorf("sweeping the test's containers: %v", err)
		}
		if ids := strings.Fields(string(out)); len(ids) > 0 {
			if _, err := run(append([]string{"podman", "rm", "--force", "--time", "0"}, ids...)...); err != nil {
				t.Errorf("sweeping the test's containers: %v", err)
			}
		}
		if r != nil {
			// podman's reference filter does not match across the
			// repository's slashes: pick r's images by name here.
			out, _ := run("podman", "images", "--format", "{{.Repository}}:{{.Tag}}")
			var refs []string
			for _, ref := range strings.Fields(string(out)) {
				if strings.HasPrefix(ref, r.Addr+"/") {
					refs = append(refs, ref)
				}
			}
			if len(refs) > 0 {
				if _, err := run(append([]string{"podman", "rmi", "--force"}, refs...)...); err != nil {
					t.Errorf("removing the test's images: %v", err)
				}
			}
		}
	})
}

// Containers lists the IDs of the containers (running or not) matching
// every label filter (KEY=VALUE). The filters must exclude other tests'
// containers on test hosts (name the owner): podman ps here fails on one
// of those (see Exec).
func Containers(t testing.TB, labelFilters ...string) []string {
	t.Helper()
	return ContainersWith(t, Here, labelFilters...)
}

// ContainersWith is Containers with podman reached through run.
func ContainersWith(t testing.TB, run Exec, labelFilters ...string) []string {
	t.Helper()
	argv := []string{"podman", "ps", "--all", "--quiet", "--no-trunc"}
	for _, f := range labelFilters {
		argv = append(argv, "--filter", "label="+f)
	}
	out, err := run(argv...)
	if err != nil {
		t.Fatalf("podman ps: %v", err)
	}
	return strings.Fields(string(out))
}

func run(t testing.TB, argv ...string) {
	t.Helper()
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
}
