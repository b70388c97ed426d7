package e2e

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/haproxy"
)

// scaleGroups are TestScaleHundredInstances's 5 groups of 20 stand-ins
// (internal/testbin/standin, 4 MB each); drain is the last group's
// drain_timeout, which the reload changes.
func scaleGroups(drain string) []groupSpec {
	var gs []groupSpec
	for i := 1; i <= 5; i++ {
		g := groupSpec{
			Name: fmt.Sprintf("g%d", i), Min: 20, Max: 20,
			Command: fmt.Sprintf(`[%q, "127.0.0.1:{{.Port}}"]`, filepath.Join(binDir, "standin")),
			Health:  "{path: /healthz, interval: 1s, rise: 2, fall: 3, timeout: 1s, grace: 30s}",
		}
		if i > 1 {
			g.Extra = fmt.Sprintf("    path_prefixes: [/g%d]\n", i)
		}
		if i == 5 {
			g.Drain = drain
		}
		gs = append(gs, g)
	}
	return gs
}

// TestScaleHundredInstances is the small version of `shoal-bench scale`,
// a check of correctness, not of timing: 100 instances over 5 groups come
// into service; after a kill -9 of the core a new one adopts all 100 (the
// same pids, HAProxy's servers in sync) and nothing leaked; a reload that
// changes one group leaves the other groups' servers untouched in HAProxy
// (none re-added: their last state change only grows older).
func TestScaleHundredInstances(t *testing.T) {
	parallel(t) // 100 idle 4 MB processes and health checks: a light load
	e := newEnv(t, "metrics: {interval: 1s}", scaleGroups("2s")...)
	e.start()
	for i := 1; i <= 5; i++ {
		e.waitInService(fmt.Sprintf("g%d", i), 20)
	}
	pids := func() map[string]int {
		out := map[string]int{}
		for _, g := range e.status().Groups {
			for _, in := range g.Instances {
				out[in.Name] = in.PID
			}
		}
		return out
	}
	before := pids()
	if len(before) != 100 {
		t.Fatalf("%d instances, want 100", len(before))
	}
	haproxyPID := e.haproxyPID()

	e.kill9()
	e.start()
	for i := 1; i <= 5; i++ {
		e.waitInService(fmt.Sprintf("g%d", i), 20)
	}
	after := pids()
	if !maps.Equal(before, after) {
		t.Fatalf("instances not all adopted after kill -9: before %v, after %v", before, after)
	}
	if e.haproxyPID() != haproxyPID {
		t.Fatalf("HAProxy restarted (pid %d → %d) instead of adopted", haproxyPID, e.haproxyPID())
	}
	for i := 1; i <= 5; i++ {
		e.checkInSync(fmt.Sprintf("g%d", i))
	}
	want := append(slices.Collect(maps.Values(after)), haproxyPID)
	got := e.ourProcesses()
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("%d live processes after the restart, want exactly the 100 instances and HAProxy (%d): leaked %v", len(got), len(want), slices.DeleteFunc(got, func(p int) bool { return slices.Contains(want, p) }))
	}

	// A reload that changes g5 only.
	servers := e.serverChanges()
	e.writeConfig("metrics: {interval: 1s}", scaleGroups("3s")...)
	e.reload()
	time.Sleep(time.Second) // let a wrongly re-added server show a fresh lastchg
	now := e.serverChanges()
	for i := 1; i <= 4; i++ {
		g := fmt.Sprintf("g%d", i)
		if len(now[g]) != 20 {
			t.Fatalf("%s has %d servers in HAProxy after the reload, want 20", g, len(now[g]))
		}
		for name, was := range servers[g] {
			if is, ok := now[g][name]; !ok || is < was {
				t.Errorf("%s/%s was touched by a reload of g5: last change %v ago before, %v after (present %v)", g, name, was, is, ok)
			}
		}
		e.checkInSync(g)
	}
	if !maps.Equal(pids(), before) {
		t.Fatal("a reload of g5 replaced instances")
	}
	e.stop()
	for _, pid := range want {
		if alive(pid) {
			t.Fatalf("pid %d still alive after shoal stopped", pid)
		}
	}
}

// serverChanges reads, for every group, how long ago each of its HAProxy
// servers last changed state: a server deleted and added again starts over.
func (e *shoalEnv) serverChanges() map[string]map[string]time.Duration {
	e.t.Helper()
	c := haproxy.Client{Socket: filepath.Join(e.stateDir(), "haproxy", "admin.sock")}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := map[string]map[string]time.Duration{}
	for _, g := range e.status().Groups {
		stats, err := c.Stats(ctx, g.Name)
		if err != nil {
			e.t.Fatalf("read HAProxy stats of %s: %v", g.Name, err)
		}
		out[g.Name] = map[string]time.Duration{}
		for _, s := range stats {
			out[g.Name][s.Name] = s.LastChange
		}
	}
	return out
}

// TestCrashLoopReportedOnce is the small version of `shoal-bench
// scalefaults`' back-off: a group of 50 whose program exits at once
// launches its 50 together once, reports their failure once (one
// instance.launch_failed event, one warning), launches nothing more
// during its back-off (60 s after so many crashes), and the group beside
// it serves on.
func TestCrashLoopReportedOnce(t *testing.T) {
	parallel(t) // 52 stand-ins, 50 of them exiting at once: a light load
	standin := filepath.Join(binDir, "standin")
	health := "{path: /healthz, interval: 1s, rise: 2, fall: 3, timeout: 1s, grace: 30s}"
	e := newEnv(t, "",
		groupSpec{Name: "ok", Min: 2, Max: 2, Command: fmt.Sprintf(`[%q, "127.0.0.1:{{.Port}}"]`, standin), Health: health},
		// No address: the stand-in prints its usage and exits 2.
		groupSpec{Name: "bad", Min: 50, Max: 50, Command: fmt.Sprintf(`[%q]`, standin), Health: health, Extra: "    path_prefixes: [/bad]\n"})
	e.start()
	e.waitInService("ok", 2)
	count := func() (launched, failed int) {
		for _, ev := range e.events(api.EventsQuery{Group: "bad", Limit: 1000}) {
			switch ev.Rule + "." + string(ev.Code) {
			case "instance.launched":
				launched++
			case "instance.launch_failed":
				failed++
			}
		}
		return launched, failed
	}
	e.eventually("the first pass of 50 launched and gone", 45*time.Second, func() error {
		s, err := e.client().Group(context.Background(), "bad")
		if err != nil {
			return err
		}
		if launched, _ := count(); launched < 50 || len(s.Instances) > 0 {
			return fmt.Errorf("%d launched, %d instances left", launched, len(s.Instances))
		}
		return nil
	})
	time.Sleep(3 * time.Second) // the back-off launches nothing meanwhile
	launched, failed := count()
	warnings := 0
	for line := range strings.Lines(e.log.String()) {
		if strings.Contains(line, `msg="instance failed"`) && strings.Contains(line, "group=bad") {
			warnings++
		}
	}
	if launched != 50 || failed != 1 || warnings != 1 {
		t.Fatalf("%d launched, %d instance.launch_failed events, %d warnings; want 50, 1 and 1 (once a back-off, not once an instance)", launched, failed, warnings)
	}
	e.waitInService("ok", 2)
	e.checkInSync("ok")
}
