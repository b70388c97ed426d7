package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/proc"
	"github.com/shoal-lb/shoal/internal/testetcd"
)

// haPairTop is a node's ha section for a pair on one machine.
func haPairTop(node, cluster, endpoint string, priority int) string {
	return fmt.Sprintf("ha:\n  node: %s\n  cluster: %s\n  priority: %d\n  lease: 2s\n  etcd: {endpoints: [%q]}\n", node, cluster, priority, endpoint)
}

// killPairInstances kills the instances marked as the pair's: they carry
// the pair's marker, not a node's state dir, so the envs' cleanup does not
// see them.
func killPairInstances(cluster string) {
	marker := "SHOAL_STATE_DIR=shoal-ha-" + cluster
	entries, _ := os.ReadDir("/proc")
	for _, d := range entries {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if env, err := proc.Environ(pid); err == nil && slices.Contains(env, marker) {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func (e *shoalEnv) waitRole(role string, within time.Duration) api.HAStatus {
	e.t.Helper()
	var st api.HAStatus
	e.eventually("role "+role, within, func() error {
		var err error
		st, err = e.client().HA(context.Background())
		if err != nil {
			return err
		}
		if st.Role != role {
			return fmt.Errorf("role %s, leader %q", st.Role, st.Leader)
		}
		return nil
	})
	return st
}

// TestHAPairTakeover: two `shoal serve` nodes of a pair (a real etcd, the
// local provider): the leader scales, the standby refuses to and mirrors
// the servers into its own HAProxy; the leader's core is killed (-9) and
// the standby leads within the lease and a margin, adopting the instances
// (none started anew), repeating no job and keeping the cooldown.
func TestHAPairTakeover(t *testing.T) {
	parallel(t)
	etcd := testetcd.Start(t)
	cluster := fmt.Sprintf("e2e-%d", os.Getpid())
	t.Cleanup(func() { killPairInstances(cluster) })
	web := groupSpec{Name: "web", Min: 1, Max: 4, CooldownUp: "10m"}

	a := newEnv(t, haPairTop("a", cluster, etcd.Endpoint, 100), web)
	a.start()
	a.waitRole("leader", 10*time.Second)
	b := newEnv(t, haPairTop("b", cluster, etcd.Endpoint, 90), web)
	b.start()
	if st := b.waitRole("standby", 5*time.Second); st.Leader != "a" || len(st.Nodes) != 2 {
		t.Fatalf("b's view: %+v", st)
	}
	// shoal ha status -o json is GET /v1/ha's answer.
	{
		out, stderr, code := b.cli("ha", "status", "-o", "json")
		var st api.HAStatus
		if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || st.Node != "b" || st.Role != "standby" || st.Leader != "a" || len(st.Nodes) != 2 {
			t.Fatalf("shoal ha status -o json on b exited %d (%v): %+v\n%s%s", code, err, st, out, stderr)
		}
	}
	if _, stderr, code := b.cli("ha", "status", "-o", "yaml"); code != 2 || !strings.Contains(stderr, "-o must be text or json") {
		t.Fatalf("shoal ha status -o yaml exited %d: %s; want 2 naming the formats", code, stderr)
	}
	a.waitInService("web", 1)
	ctx := context.Background()

	// Each node's own events (here its HAProxy dying and restarted) are
	// listed by both nodes, the leader's and the standby's alike.
	for _, n := range []*shoalEnv{a, b} {
		pid := n.haproxyPID()
		if pid <= 0 {
			t.Fatal("no HAProxy master recorded")
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		n.eventually("HAProxy restarted", 30*time.Second, func() error {
			if now := n.haproxyPID(); now == pid || now <= 0 {
				return fmt.Errorf("HAProxy master pid %d", now)
			}
			return nil
		})
	}
	haproxyEvents := func(n *shoalEnv) map[string]bool {
		t.Helper()
		evs, err := n.client().Events(ctx, api.EventsQuery{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		by := map[string]bool{}
		for _, e := range evs {
			if e.Rule == "haproxy" && e.Code == "restarted" {
				node, _, _ := strings.Cut(e.Reason, ":")
				by[node] = true
			}
		}
		return by
	}
	for _, n := range []*shoalEnv{a, b} {
		n.eventually("both nodes' haproxy.restarted events", 10*time.Second, func() error {
			if by := haproxyEvents(n); !by["node a"] || !by["node b"] {
				return fmt.Errorf("haproxy.restarted events by node: %v; want node a and node b", by)
			}
			return nil
		})
		if out, stderr, code := n.cli("events", "--since", "1h"); code != 0 || !strings.Contains(out, "node a: ") || !strings.Contains(out, "node b: ") {
			t.Fatalf("shoal events lacks a node's HAProxy restart (exit %d):\n%s%s", code, out, stderr)
		}
	}
	a.waitInService("web", 1)

	three := 3
	if _, err := b.client().Scale(ctx, "web", api.ScaleRequest{Size: &three}); err == nil || !strings.Contains(err.Error(), "standby: the leader is a") {
		t.Fatalf("a scale on the standby: %v, want 503 naming the leader", err)
	}
	j, err := a.client().Scale(ctx, "web", api.ScaleRequest{Size: &three})
	if err != nil {
		t.Fatal(err)
	}
	if j, err = a.client().WaitJob(ctx, j.ID); err != nil || j.State != "done" {
		t.Fatalf("scale job: %+v, %v", j, err)
	}
	a.waitInService("web", 3)
	before, err := a.client().Group(ctx, "web")
	if err != nil || before.UpCooldown == nil {
		t.Fatalf("a's group: %+v, %v", before, err)
	}
	names := map[string]string{}
	for _, in := range before.Instances {
		names[in.Name] = in.Addr
	}

	// The standby's HAProxy has the leader's servers, and says so.
	b.eventually("b's HAProxy mirrors a's servers", 10*time.Second, func() error {
		if got := b.haproxyServers("web"); !maps.Equal(got, names) {
			return fmt.Errorf("b's HAProxy has %v, a's instances are %v", got, names)
		}
		st, err := b.client().HA(ctx)
		if err != nil {
			return err
		}
		for _, n := range st.Nodes {
			if n.Name == "b" && (!n.HAProxySynced || n.Servers != 3) {
				return fmt.Errorf("b publishes %+v", n)
			}
		}
		return nil
	})

	a.kill9()
	killed := time.Now()
	b.waitRole("leader", 6*time.Second)
	took := time.Since(killed)
	t.Logf("b leads %s after a's core was killed (lease 2s)", took.Round(10*time.Millisecond))
	if took > 4*time.Second {
		t.Errorf("takeover took %s, want within lease + 2s", took)
	}

	// b adopted the three instances: the same names and addresses, in service.
	b.waitInService("web", 3)
	after, err := b.client().Group(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range after.Instances {
		if names[in.Name] != in.Addr {
			t.Errorf("b runs %s at %s; a's instances were %v", in.Name, in.Addr, names)
		}
	}
	if after.Desired != 3 || after.UpCooldown == nil || !after.UpCooldown.Equal(*before.UpCooldown) {
		t.Errorf("b's group: desired %d, up cooldown %v; a's was %v", after.Desired, after.UpCooldown, before.UpCooldown)
	}
	jobs, err := b.client().Jobs(ctx, "web", 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || jobs[0].ID != j.ID || jobs[0].State != "done" {
		t.Errorf("jobs after the takeover: %+v, want only %s, done", jobs, j.ID)
	}
	b.checkInSync("web")

	// b recorded the takeover, naming both leaders.
	events, err := b.client().Events(ctx, api.EventsQuery{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range events {
		found = found || (e.Rule == "leader" && e.Code == "changed" && e.Reason == "leader changed: a → b")
	}
	if !found {
		t.Errorf("no leader.changed event from a to b in %+v", events)
	}
	if by := haproxyEvents(b); !by["node a"] {
		t.Errorf("after the takeover, b lists no haproxy.restarted of a's: %v", by)
	}
	if _, _, code := b.cli("ha", "check", "--leader"); code != 0 {
		t.Errorf("shoal ha check --leader on the leader exited %d", code)
	}

	// a comes back (its HAProxy, killed with it, is adopted or restarted)
	// as the standby; a step-down of b hands the pair back to it with the
	// same instances, no job run.
	a.start()
	a.waitRole("standby", 10*time.Second)
	if _, _, code := a.cli("ha", "check", "--leader"); code != 1 {
		t.Errorf("shoal ha check --leader on the standby exited %d, want 1", code)
	}
	if _, _, code := a.cli("ha", "check"); code != 0 {
		t.Errorf("shoal ha check on the standby exited %d, want 0", code)
	}
	// The leader hands over only once a's own checks have every instance
	// UP; until then it refuses, saying so.
	var out, stderr string
	var code int
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		out, stderr, code = b.cli("ha", "step-down")
		if code == 0 || !strings.Contains(stderr, "no standby is ready to take over: a's HAProxy does not have every instance UP yet") || time.Now().After(deadline) {
			break
		}
	}
	if code != 0 || !strings.Contains(out, "the leader is a") {
		t.Fatalf("shoal ha step-down: %d %q %q", code, out, stderr)
	}
	a.waitRole("leader", 5*time.Second)
	b.waitRole("standby", 5*time.Second)
	a.waitInService("web", 3)
	back, err := a.client().Group(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range back.Instances {
		if names[in.Name] != in.Addr {
			t.Errorf("a runs %s at %s after the handover; the instances were %v", in.Name, in.Addr, names)
		}
	}
	if jobs, err := a.client().Jobs(ctx, "web", 100); err != nil || len(jobs) != 1 {
		t.Errorf("jobs after the handover: %+v, %v", jobs, err)
	}
	if out, _, _ := b.cli("status"); !strings.Contains(out, "HA  node b (standby)  leader a") {
		t.Errorf("shoal status on b lacks the HA block:\n%s", out)
	}
}
