package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/container"
	"github.com/shoal-lb/shoal/internal/group"
	"github.com/shoal-lb/shoal/internal/testcontainer"
)

// namesOf are the names of g's instances, sorted.
func namesOf(g group.Status) []string {
	var names []string
	for _, in := range g.Instances {
		names = append(names, in.Name)
	}
	slices.Sort(names)
	return names
}

// containerImages lists the image of every container labelled with owner,
// through run.
func containerImages(t *testing.T, run testcontainer.Exec, owner string) []string {
	t.Helper()
	out, err := run("podman", "ps", "--all", "--filter", "label="+container.LabelOwner+"="+owner, "--format", "{{.Image}}")
	if err != nil {
		t.Fatalf("podman ps: %v", err)
	}
	imgs := strings.Fields(string(out))
	slices.Sort(imgs)
	return imgs
}

// TestContainerGroup runs a group of containers of an image built in the
// test and pulled from a registry on 127.0.0.1, under keep-alive load:
// it scales 2 → 4, a deploy of a tag the registry lacks fails before it
// touches an instance (the runtime's words in the job), a deploy to a new
// tag replaces every container, and a kill -9 of shoal with the CPU
// saturated is followed by the adoption of every container by its labels
// (none replaced, none orphaned); no request fails. A stop of shoal
// leaves no container.
func TestContainerGroup(t *testing.T) {
	parallel(t)
	testcontainer.Podman(t)
	reg := testcontainer.StartRegistry(t)
	v1 := reg.PushDemo(t, "shoaltest/web", "1")
	v2 := reg.PushDemo(t, "shoaltest/web", "2")
	g := groupSpec{Name: "web", Min: 2, Max: 4, Drain: "2s",
		Container: fmt.Sprintf(`image: %q, port: 8080, insecure_registry: true, args: ["--listen", ":8080", "--name", "{{.Name}}"]`, v1)}
	// A group whose tag the registry lacks: its starts fail, and back off.
	missing := groupSpec{Name: "gone", Min: 1, Max: 1, Extra: "    hosts: [gone.example]\n",
		Container: fmt.Sprintf(`image: %q, port: 8080, insecure_registry: true`, reg.Ref("shoaltest/web", "never-pushed"))}
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	e := newEnv(t, fmt.Sprintf("metrics:\n  listen: %s\n", metricsAddr), g, missing)
	owner := e.stateDir()
	testcontainer.Sweep(t, reg, container.LabelOwner+"="+owner)
	if out, stderr, code := e.cli("validate"); code != 0 {
		t.Fatalf("validate exited %d:\n%s%s", code, out, stderr)
	}
	e.start()
	e.waitInService("web", 2)
	if imgs := containerImages(t, testcontainer.Here, owner); !slices.Equal(imgs, []string{v1, v1}) {
		t.Fatalf("containers run %v, want 2 of %s", imgs, v1)
	}
	// Their CPU and memory are read as a process's.
	e.eventually("the containers' memory in /metrics", 20*time.Second, func() error {
		_, text := httpGet(t, "http://"+metricsAddr+"/metrics", "")
		for _, name := range []string{"web-001", "web-002"} {
			series := `shoal_instance_resident_memory_bytes{group="web",instance="` + name + `"}`
			if v := metricValue(text, series); v == "" || v == "0" {
				return fmt.Errorf("%s = %q", series, v)
			}
		}
		return nil
	})
	// The missing tag: the group's instance fails with podman's words, is
	// retried with back-off, and leaves no container.
	e.eventually("the missing tag's failure in the events", 30*time.Second, func() error {
		for _, ev := range e.events(api.EventsQuery{Group: "gone"}) {
			if strings.Contains(strings.ToLower(ev.Reason), "manifest unknown") {
				return nil
			}
		}
		return fmt.Errorf("no event of group gone says manifest unknown: %+v", e.events(api.EventsQuery{Group: "gone"}))
	})
	if ids := testcontainer.Containers(t, container.LabelOwner+"="+owner, container.LabelGroup+"=gone"); len(ids) != 0 {
		t.Fatalf("the failed starts left containers: %v", ids)
	}

	stop := load(t, e)
	time.Sleep(500 * time.Millisecond)
	scaleSync(t, e, "--size", "4")
	e.waitInService("web", 4)
	e.checkInSync("web")
	before := groupOf(t, e.status(), "web")
	names := namesOf(before)

	// A tag the registry lacks: the deploy fails at the pull, no instance touched.
	out, stderr, code := e.cli("deploy", "web", "--set", "template.image="+reg.Ref("shoaltest/web", "no-such-tag"), "--sync")
	t.Logf("shoal deploy of a missing tag:\n%s%s", out, stderr)
	if code != 1 || !strings.Contains(out, "no instance was touched") || !strings.Contains(strings.ToLower(out), "manifest unknown") {
		t.Fatalf("deploy of a missing tag exited %d; want 1 with the runtime's message:\n%s%s", code, out, stderr)
	}
	if now := groupOf(t, e.status(), "web"); !slices.Equal(namesOf(now), names) || now.Version != before.Version {
		t.Fatalf("after the failed deploy: instances %v version %s, want %v version %s", namesOf(now), now.Version, names, before.Version)
	}

	// A new tag rolls out like any template change.
	out, stderr, code = e.cli("deploy", "web", "--set", "template.image="+v2, "--sync")
	if code != 0 {
		t.Fatalf("deploy to %s exited %d:\n%s%s", v2, code, out, stderr)
	}
	e.waitInService("web", 4)
	deployed := groupOf(t, e.status(), "web")
	if deployed.Version == before.Version || versions(deployed)[deployed.Version] != 4 {
		t.Fatalf("after the deploy: version %s (was %s), instances %v", deployed.Version, before.Version, versions(deployed))
	}
	want := []string{v2, v2, v2, v2}
	e.eventually("the old containers are gone", 30*time.Second, func() error {
		if imgs := containerImages(t, testcontainer.Here, owner); !slices.Equal(imgs, want) {
			return fmt.Errorf("containers run %v, want %v", imgs, want)
		}
		return nil
	})

	// The load stops while the test waits in line (minutes, when the line
	// is held) and starts again in its busy step.
	checkNoFailures(t, "the scale-out and the deploys", stop())

	// kill -9 with the CPU saturated: the containers serve on; the next
	// shoal adopts each by its labels.
	names = namesOf(deployed)
	busy(t)
	stop = load(t, e)
	stopHogs := cpuHogs(t, 4, 3*time.Minute)
	defer stopHogs()
	time.Sleep(500 * time.Millisecond)
	e.kill9()
	time.Sleep(2 * time.Second)
	e.start()
	e.waitInService("web", 4)
	adopted := groupOf(t, e.status(), "web")
	if !slices.Equal(namesOf(adopted), names) {
		t.Fatalf("after kill -9 and restart: instances %v, want the same %v adopted", namesOf(adopted), names)
	}
	if imgs := containerImages(t, testcontainer.Here, owner); !slices.Equal(imgs, want) {
		t.Fatalf("after the restart containers run %v, want %v (no orphan, none replaced)", imgs, want)
	}
	if !strings.Contains(e.log.String(), "adopted container") {
		t.Fatalf("shoal's log does not say it adopted containers:\n%s", e.log)
	}
	e.checkInSync("web")
	time.Sleep(time.Second)
	stopHogs()
	checkNoFailures(t, "kill -9 and adoption with the CPU saturated", stop())

	e.stop()
	if ids := testcontainer.Containers(t, container.LabelOwner+"="+owner); len(ids) != 0 {
		t.Fatalf("containers left after shoal stopped: %v", ids)
	}
}

// TestContainerKillDuringPull kills shoal -9 while its first instance's
// image is being pulled and run (right after it answers, before the
// instance is in service), three times over: every restart adopts what was
// recorded and removes what was not, so that in the end exactly the
// group's instances run, one container each, and a stop leaves none.
func TestContainerKillDuringPull(t *testing.T) {
	parallel(t)
	testcontainer.Podman(t)
	reg := testcontainer.StartRegistry(t)
	image := reg.PushDemo(t, "shoaltest/killed", "1")
	g := groupSpec{Name: "web", Min: 2, Max: 2,
		Container: fmt.Sprintf(`image: %q, port: 8080, insecure_registry: true, args: ["--listen", ":8080", "--name", "{{.Name}}"]`, image)}
	e := newEnv(t, "", g)
	owner := e.stateDir()
	testcontainer.Sweep(t, reg, container.LabelOwner+"="+owner)
	for i, wait := range []time.Duration{0, 300 * time.Millisecond, 800 * time.Millisecond} {
		e.start()
		time.Sleep(wait)
		e.kill9()
		t.Logf("kill %d after %s: containers %d", i+1, wait, len(testcontainer.Containers(t, container.LabelOwner+"="+owner)))
	}
	e.start()
	e.waitInService("web", 2)
	names := namesOf(groupOf(t, e.status(), "web"))
	e.eventually("one container per instance, none orphaned", 30*time.Second, func() error {
		if all := testcontainer.Containers(t, container.LabelOwner+"="+owner); len(all) != len(names) {
			return fmt.Errorf("%d containers, want %d (one for each of %v)", len(all), len(names), names)
		}
		for _, n := range names {
			if ids := testcontainer.Containers(t, container.LabelOwner+"="+owner, container.LabelInstance+"="+n); len(ids) != 1 {
				return fmt.Errorf("instance %s has containers %v, want one", n, ids)
			}
		}
		return nil
	})
	e.stop()
	if ids := testcontainer.Containers(t, container.LabelOwner+"="+owner); len(ids) != 0 {
		t.Fatalf("containers left after shoal stopped: %v", ids)
	}
}

// TestContainerGroupOnSSHHost runs a container group on a namespace host
// over SSH (podman there, through shoal's session), its registry on the
// host's link (this machine's end, which it reaches), under keep-alive
// load: it scales 2 → 3, `shoal logs` reads a container's output over SSH,
// a deploy of a missing tag fails at the host's pull before it touches an
// instance, a deploy to a new tag pulls it on the host and replaces every
// container, and after a kill -9 of shoal every container is adopted (none
// replaced, none orphaned); no request fails. A stop leaves no container.
func TestContainerGroupOnSSHHost(t *testing.T) {
	parallel(t)
	testcontainer.Podman(t) // before the lab: its sshd passes podman's settings on
	lab := newLab(t, 1)
	reg := testcontainer.StartRegistryOn(t, lab.Hosts[0].Peer)
	v1 := reg.PushDemo(t, "shoaltest/sshweb", "1")
	v2 := reg.PushDemo(t, "shoaltest/sshweb", "2")
	g := sshGroup("web", "rack", 2, 3, "")
	g.Command, g.Drain = "", "2s"
	g.Container = fmt.Sprintf(`image: %q, port: 8080, insecure_registry: true, args: ["--listen", ":8080", "--name", "{{.Name}}"]`, v1)
	e := newEnv(t, sshProviders(lab, t.TempDir(), map[string][]sshHost{"rack": {{h: lab.Hosts[0]}}}), g)
	e.start()
	e.waitInService("web", 2)
	// The host's containers are seen from its sessions only.
	on := testcontainer.Over(lab.KeyFile, lab.KnownHosts, lab.User, lab.Hosts[0].Addr)
	owner := ""
	for _, id := range testcontainer.ContainersWith(t, on, container.LabelHost+"="+lab.Hosts[0].Addr, container.LabelInstance+"=web-001") {
		out, err := on("podman", "inspect", "--format", `{{index .Config.Labels "shoal.owner"}}`, id)
		if err != nil {
			t.Fatal(err)
		}
		owner = strings.TrimSpace(string(out))
	}
	if owner == "" {
		t.Fatalf("no container of web-001 on %s", lab.Hosts[0].Addr)
	}
	testcontainer.SweepWith(t, on, reg, container.LabelOwner+"="+owner)

	stop := sshLoad(t, e)
	time.Sleep(500 * time.Millisecond)
	scaleSync(t, e, "--size", "3")
	e.waitInService("web", 3)
	e.checkInSync("web")
	before := groupOf(t, e.status(), "web")
	out, stderr, code := e.cliWithin(15*time.Second, "logs", "web-001")
	if code != 0 || !strings.Contains(out+stderr, "serving") {
		t.Fatalf("shoal logs web-001: exit %d, want its startup line:\n%s%s", code, out, stderr)
	}

	out, stderr, code = e.cli("deploy", "web", "--set", "template.image="+reg.Ref("shoaltest/sshweb", "no-such-tag"), "--sync")
	if code != 1 || !strings.Contains(out, "no instance was touched") || !strings.Contains(out, "on host "+lab.Hosts[0].Addr) || !strings.Contains(strings.ToLower(out), "manifest unknown") {
		t.Fatalf("deploy of a missing tag exited %d; want 1 with podman's message from the host:\n%s%s", code, out, stderr)
	}
	if now := groupOf(t, e.status(), "web"); !slices.Equal(namesOf(now), namesOf(before)) || now.Version != before.Version {
		t.Fatalf("after the failed deploy: instances %v version %s, want %v version %s", namesOf(now), now.Version, namesOf(before), before.Version)
	}
	out, stderr, code = e.cli("deploy", "web", "--set", "template.image="+v2, "--sync")
	if code != 0 {
		t.Fatalf("deploy to %s exited %d:\n%s%s", v2, code, out, stderr)
	}
	e.waitInService("web", 3)
	want := []string{v2, v2, v2}
	e.eventually("the old containers are gone", 30*time.Second, func() error {
		if imgs := containerImages(t, on, owner); !slices.Equal(imgs, want) {
			return fmt.Errorf("containers run %v, want %v", imgs, want)
		}
		return nil
	})

	names := namesOf(groupOf(t, e.status(), "web"))
	e.kill9()
	time.Sleep(time.Second)
	e.start()
	e.waitInService("web", 3)
	if got := namesOf(groupOf(t, e.status(), "web")); !slices.Equal(got, names) {
		t.Fatalf("after kill -9 and restart: instances %v, want the same %v adopted", got, names)
	}
	if imgs := containerImages(t, on, owner); !slices.Equal(imgs, want) {
		t.Fatalf("after the restart containers run %v, want %v (no orphan, none replaced)", imgs, want)
	}
	e.checkInSync("web")
	time.Sleep(time.Second)
	res := stop()
	t.Logf("%d requests, %d failures, spread %v", res.Requests, res.Failures, res.ByInstance)
	if res.Failures != 0 {
		t.Fatalf("%d of %d requests failed: %v", res.Failures, res.Requests, res.FailureSamples)
	}
	e.stop()
	e.eventually("no container left after shoal stopped", 15*time.Second, func() error {
		if ids := testcontainer.ContainersWith(t, on, container.LabelOwner+"="+owner); len(ids) != 0 {
			return fmt.Errorf("containers left: %v", ids)
		}
		return nil
	})
}
