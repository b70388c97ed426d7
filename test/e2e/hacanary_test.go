package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/jobrun"
)

// TestHAPairCanaryFailover: the leader of an HA pair is killed (every
// process of its node, -9) while a canary runs its first step under load
// through the VIP. The new leader does what docs/deploys.md says a
// restart does: it adopts the canary's instance and rolls the canary back
// (the instance drained and stopped, a canary.rolled_back event, the
// deploy's job failed), and the stable version serves. Only the requests
// in flight at the crash may fail, as in TestHAPairCrash.
func TestHAPairCanaryFailover(t *testing.T) {
	parallel(t)
	g := sshGroup("web", "rack", 2, 4, "    placement: {strategy: spread}\n"+
		"    deploy: {strategy: canary, canary: {steps: [{weight: 25%, for: 10m}, {weight: 100%}]}}\n")
	g.Env = `{RELEASE: "{{.Vars.release}}"}`
	g.Template = "      vars: {release: \"1\"}\n"
	p := newHAPair(t, 1, haSpec{priorities: [2]int{100, 90}, vip: true, hosts: true, group: &g})
	a, b := p.node("node-a"), p.node("node-b")
	a.start()
	p.waitRoles(a, 20*time.Second)
	b.start()
	p.waitRoles(a, 20*time.Second, b)
	p.waitVIP(a, 15*time.Second)
	p.waitSettled(a, 2, b)
	stable := groupOf(t, a.status(), "web").Version

	out, stderr, code := a.cli("deploy", "web", "--set", "release=2")
	if code != 0 {
		t.Fatalf("canary deploy on %s exited %d:\n%s%s", a.name, code, out, stderr)
	}
	id := strings.Fields(out)[1]
	waitDeployStatus(t, a.shoalEnv, "the canary's first step running", time.Minute, "step 1/2", "running")
	p.waitMirrored(a, b, 3)

	load := p.clientLoad(haCrashTimeout) // as TestHAPairCrash: a SYN the dead node's kernel drops is sent again
	time.Sleep(time.Second)
	p.killNode(a)
	p.waitRoles(b, 20*time.Second)
	p.waitVIP(b, 15*time.Second, a)
	b.eventually("the canary rolled back by "+b.name, 30*time.Second, func() error {
		s := groupOf(t, b.status(), "web")
		if v := versions(s); len(s.Instances) != 2 || v[stable] != 2 || s.InService != 2 || s.Deploying != "" {
			return fmt.Errorf("%d instances (%d in service) by version %v, deploying %q; want the 2 of %s", len(s.Instances), s.InService, v, s.Deploying, stable)
		}
		return nil
	})
	time.Sleep(time.Second)
	res := load()
	t.Logf("keep-alive load through the failover and the rollback: %d requests, %d failed %v, longest gap %v",
		res.Requests, res.Failures, res.FailureSamples, res.gap().Round(time.Millisecond))
	if res.Requests < 100 {
		t.Fatalf("the client did not run: %d requests", res.Requests)
	}
	// Each worker had at most one request in flight when the node died.
	if res.Failures > loadConcurrency {
		t.Errorf("%d requests failed through the failover and the rollback; want only those in flight at the crash, at most %d: %v", res.Failures, loadConcurrency, res.FailureSamples)
	}
	if res.gap() > haOutageLimit {
		t.Errorf("the client saw no success for %v; want at most %v", res.gap(), haOutageLimit)
	}
	p.waitSettled(b, 2, nil)

	evs := filterEvents(b.events(api.EventsQuery{Group: "web"}), eventOf("canary.rolled_back", ""))
	if len(evs) != 1 || !strings.Contains(evs[0].Reason, "rolled back: interrupted by a restart of shoal or a change of HA leader") {
		t.Errorf("canary.rolled_back events on %s: %+v, want one saying why", b.name, evs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if j, err := b.client().Job(ctx, id, 0); err != nil || j.State != jobrun.Failed {
		t.Errorf("the canary's deploy job on %s: %+v, %v; want failed", b.name, j, err)
	}
	if st := deployStatus(t, b.shoalEnv); !strings.Contains(st, "no canary running") {
		t.Errorf("deploy status on %s after the rollback:\n%s", b.name, st)
	}
}
