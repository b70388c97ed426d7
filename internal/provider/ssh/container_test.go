package ssh

import (
	"bytes"
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/container"
	"github.com/shoal-lb/shoal/internal/provider"
	"github.com/shoal-lb/shoal/internal/testcontainer"
)

// TestContainersOnHosts runs a container template on the lab's hosts
// (network namespaces with sshd; podman there through the session, its
// storage this machine's): each container serves on its host's address,
// its process is sampled by the host's poll, its logs come over SSH, a
// restarted provider adopts it, a sweep without its record removes it, and
// a stop leaves no container. The registry is on this machine's 127.0.0.1,
// which the hosts' namespaces cannot reach: the image is pulled here into
// the storage the hosts share, and a deploy's pull from the hosts fails
// with the runtime's words, as a registry that is down does.
func TestContainersOnHosts(t *testing.T) {
	t.Parallel()            // its own lab, owner, state, registry and image
	testcontainer.Podman(t) // before the lab: its sshd passes podman's settings on
	reg := testcontainer.StartRegistry(t)
	image := reg.PushDemo(t, "shoaltest/ssh", "1")
	if out, err := exec.Command("podman", "pull", "--quiet", "--tls-verify=false", image).CombinedOutput(); err != nil {
		t.Fatalf("pull %s here: %v\n%s", image, err, out)
	}
	l := newLab(t, 2)
	state := t.TempDir()
	p1 := runProvider(t, labConfig(t, l), Options{StateDir: state})
	on := make([]testcontainer.Exec, len(l.Hosts))
	for i, h := range l.Hosts {
		// A host's containers are seen from its sessions only.
		on[i] = testcontainer.Over(l.KeyFile, l.KnownHosts, l.User, h.Addr)
		testcontainer.SweepWith(t, on[i], reg, container.LabelOwner+"="+p1.owner, container.LabelHost+"="+h.Addr)
	}
	onHostOf := func(rec provider.Record) testcontainer.Exec {
		for i, h := range l.Hosts {
			if h.Addr == rec.Host {
				return on[i]
			}
		}
		t.Fatalf("no lab host %s", rec.Host)
		return nil
	}
	tmpl := config.Template{Image: image, Port: 8080, Runtime: config.RuntimePodman, InsecureRegistry: true,
		Args: []string{"--listen", ":8080", "--name", "{{.Name}}"}, StopTimeout: 3 * time.Second, CPUs: 1}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, err := p1.Start(ctx, spec("web", 1, tmpl))
	if err != nil {
		t.Fatal(err)
	}
	b, err := p1.Start(ctx, spec("web", 2, tmpl))
	if err != nil {
		t.Fatal(err)
	}
	if a.Record().Host == b.Record().Host {
		t.Errorf("spread put both on %s", a.Record().Host)
	}
	for _, in := range []provider.Instance{a, b} {
		serving(t, in)
		if !running(in.Record()) {
			t.Errorf("%s: its container's process is not the recorded one", in.Record().Name)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		u, ok := a.(provider.Sampler).Usage()
		if ok && u.RSS > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no usage sample of the container: %+v %v", u, ok)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var logs bytes.Buffer
	if err := p1.Logs(ctx, a.Record(), provider.LogOptions{Lines: 5}, &logs); err != nil || !strings.Contains(logs.String(), "serving") {
		t.Fatalf("logs over ssh: %v\n%s", err, logs.String())
	}

	// The hosts cannot reach the registry: the pull fails there, with podman's message.
	err = p1.Prepare(ctx, tmpl)
	if err == nil || !strings.Contains(err.Error(), "on host "+l.Hosts[0].Addr) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Prepare from hosts that cannot reach the registry: %v", err)
	}

	// providers check: the runtime on each host, or its absence.
	absent := tmpl
	absent.Runtime = "no-such-runtime"
	for _, r := range p1.Preflight(ctx, map[string]config.Template{"web": tmpl, "odd": absent}) {
		if r.OK || len(r.Problems) != 1 || !strings.Contains(r.Problems[0], "template of group odd: container runtime no-such-runtime: command no-such-runtime not found on host "+r.Host) {
			t.Errorf("preflight of %s: problems %q", r.Host, r.Problems)
		}
		if !slices.Contains(r.Notes, "group web: container runtime podman found") {
			t.Errorf("preflight of %s: notes %q", r.Host, r.Notes)
		}
	}

	// A restarted shoal adopts a; its sweep with only a kept removes b's container.
	p2 := runProvider(t, labConfig(t, l), Options{StateDir: state})
	a2, err := p2.Adopt(ctx, a.Record(), tmpl)
	if err != nil {
		t.Fatal(err)
	}
	stopped, err := p2.StopStrays(ctx, []provider.Record{a.Record()})
	if err != nil {
		t.Fatal(err)
	}
	if len(stopped) == 0 || stopped[0].Name != "web-002" {
		t.Fatalf("sweep stopped %+v, want web-002", stopped)
	}
	waitDone(t, b, 5*time.Second)
	eventually := func(what string, f func() bool) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for !f() {
			if time.Now().After(deadline) {
				t.Fatal(what)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	eventually("web-002's container is left after the sweep", func() bool {
		return len(testcontainer.ContainersWith(t, onHostOf(b.Record()), container.LabelOwner+"="+p1.owner, container.LabelHost+"="+b.Record().Host)) == 0
	})
	serving(t, a2)

	// Stop: the runtime's stop, the container gone.
	if err := a2.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	waitDone(t, a2, time.Second)
	if running(a.Record()) {
		t.Error("stopped container's process still runs")
	}
	eventually("containers left after the stop", func() bool {
		return len(testcontainer.ContainersWith(t, onHostOf(a.Record()), container.LabelOwner+"="+p1.owner, container.LabelHost+"="+a.Record().Host)) == 0
	})
}

// TestContainerPullOnHost: a host pulls from a registry it reaches (on its
// link's other end, this machine's side): a deploy's pull there succeeds
// and the container runs the pulled image; a tag the registry lacks fails
// with podman's words from the host.
func TestContainerPullOnHost(t *testing.T) {
	t.Parallel() // its own lab, owner, state, registry and image
	testcontainer.Podman(t)
	l := newLab(t, 1)
	reg := testcontainer.StartRegistryOn(t, l.Hosts[0].Peer)
	image := reg.PushDemo(t, "shoaltest/onhost", "1")
	p := runProvider(t, labConfig(t, l), Options{StateDir: t.TempDir()})
	on := testcontainer.Over(l.KeyFile, l.KnownHosts, l.User, l.Hosts[0].Addr)
	testcontainer.SweepWith(t, on, reg, container.LabelOwner+"="+p.owner)
	tmpl := config.Template{Image: image, Port: 8080, Runtime: config.RuntimePodman, InsecureRegistry: true,
		Args: []string{"--listen", ":8080", "--name", "{{.Name}}"}, StopTimeout: 3 * time.Second, CPUs: 1}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p.waitFirst(ctx, p.hostOf(l.Hosts[0].Addr))

	if err := p.Prepare(ctx, tmpl); err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	if out, err := exec.Command("podman", "image", "exists", image).CombinedOutput(); err != nil {
		t.Fatalf("the host's pull left no image %s: %v %s", image, err, out)
	}
	in, err := p.Start(ctx, spec("web", 1, tmpl))
	if err != nil {
		t.Fatal(err)
	}
	serving(t, in)

	missing := tmpl
	missing.Image = reg.Ref("shoaltest/onhost", "no-such-tag")
	err = p.Prepare(ctx, missing)
	if err == nil || !strings.Contains(err.Error(), "on host "+l.Hosts[0].Addr) || !strings.Contains(strings.ToLower(err.Error()), "manifest unknown") {
		t.Fatalf("Prepare of a missing tag: %v, want podman's manifest unknown from the host", err)
	}
	if _, err := p.Start(ctx, spec("web", 2, missing)); err == nil || !strings.Contains(strings.ToLower(err.Error()), "manifest unknown") {
		t.Fatalf("Start of a missing tag: %v", err)
	}
	if err := in.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if ids := testcontainer.ContainersWith(t, on, container.LabelOwner+"="+p.owner); len(ids) != 0 {
		t.Fatalf("containers left: %v", ids)
	}
}

// TestContainerPullAhead: a host added to the provider (or back) pulls the
// images of the container templates prepared so far as it connects, before
// an instance is placed there.
func TestContainerPullAhead(t *testing.T) {
	t.Parallel() // its own lab, owner, state, registry and image
	testcontainer.Podman(t)
	l := newLab(t, 1)
	reg := testcontainer.StartRegistryOn(t, l.Hosts[0].Peer)
	image := reg.PushDemo(t, "shoaltest/ahead", "1")
	empty := labConfig(t, l)
	empty.Hosts = nil
	p := runProvider(t, empty, Options{StateDir: t.TempDir()})
	testcontainer.SweepWith(t, testcontainer.Over(l.KeyFile, l.KnownHosts, l.User, l.Hosts[0].Addr), reg, container.LabelOwner+"="+p.owner)
	tmpl := config.Template{Image: image, Port: 8080, Runtime: config.RuntimePodman, InsecureRegistry: true, StopTimeout: time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.Prepare(ctx, tmpl); err != nil {
		t.Fatalf("Prepare with no host: %v", err)
	}
	if err := exec.Command("podman", "image", "exists", image).Run(); err == nil {
		t.Fatalf("%s is here before any host pulled it", image)
	}
	if err := p.Update(labConfig(t, l)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for exec.Command("podman", "image", "exists", image).Run() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("the new host did not pull %s ahead", image)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
