package group

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
)

// canaryReconciler runs web-001..web-003 of version 1 in service on fakes,
// deployed by canary with step first, then 100 %.
func canaryReconciler(t *testing.T, step config.CanaryStep) *reconciler {
	t.Helper()
	c := reconcilerConfig()
	c.MaxSize = 8
	c.Template.Command = []string{"app", "{{.Vars.release}}"}
	c.Template.Vars = map[string]string{"release": "1"}
	c.Deploy = config.DefaultDeploy
	c.Deploy.Strategy = config.StrategyCanary
	c.Deploy.Canary = &config.Canary{Steps: []config.CanaryStep{step, {Weight: 100}}}
	r := newReconcilerOf(t, c, 3, nil)
	r.awaitStarts(3)
	r.bringUp("web-001", "web-002", "web-003")
	return r
}

// deployCanary starts a canary deploy of release 2 and returns its version
// and Deploy's result, once it returns.
func (r *reconciler) deployCanary() (string, <-chan error) {
	r.t.Helper()
	target, err := r.g.DeployTarget(map[string]string{"release": "2"})
	if err != nil {
		r.t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- r.g.Deploy(context.Background(), target, func(string) {}) }()
	return target.Version("web"), errc
}

// serve brings the instances named into service. Beside a canary's
// ticker (as often as their health polls) bringUp cannot tell when their
// gates poll, so their checks pass once HAProxy has them and the clock
// moves a poll at a time until they are in service.
func (r *reconciler) serve(names ...string) {
	r.t.Helper()
	for _, n := range names {
		waitFor(r.t, n+" added", func() bool { return slices.Contains(r.ev.of(n), "add") })
		r.lb.set(n, "UP", "L7OK")
	}
	for i := 0; ; i++ {
		in := 0
		for _, n := range names {
			if s, _ := r.state(n); s == InService {
				in++
			}
		}
		if in == len(names) {
			return
		}
		if i == 40 {
			r.t.Fatalf("%d of %v in service after 40 health polls", in, names)
		}
		r.clk.Advance(healthPoll)
		time.Sleep(5 * time.Millisecond)
	}
}

// versionOf is the version an instance runs ("" when there is none).
func (r *reconciler) versionOf(name string) string {
	r.g.mu.Lock()
	defer r.g.mu.Unlock()
	if in := r.g.insts[name]; in != nil {
		return in.version
	}
	return ""
}

// weights is the weight HAProxy was last told of each server.
func (r *reconciler) weights() map[string]int {
	r.ev.mu.Lock()
	defer r.ev.mu.Unlock()
	out := map[string]int{}
	for _, e := range r.ev.all {
		var name string
		var w int
		if _, err := fmt.Sscanf(e, "weight %s %d", &name, &w); err == nil {
			out[name] = w
		}
	}
	return out
}

// awaitShare waits until the weights of the servers in service give the
// canary's version share % of the requests (within 0.5 point), with
// canaries and stables servers of each.
func (r *reconciler) awaitShare(version string, share float64, canaries, stables int) {
	r.t.Helper()
	var got string
	defer func() {
		if r.t.Failed() {
			r.t.Logf("last weights: %s %v", got, r.weights())
		}
	}()
	waitFor(r.t, fmt.Sprintf("weights giving %g%% to %d canary beside %d stable", share, canaries, stables), func() bool {
		ws := r.weights()
		r.g.mu.Lock()
		var c, s, wc, wAll int
		for _, in := range r.g.insts {
			if in.state != InService || in.retiring {
				continue
			}
			wAll += ws[in.name]
			if in.version == version {
				c++
				wc += ws[in.name]
			} else {
				s++
			}
		}
		r.g.mu.Unlock()
		if wAll == 0 {
			return false
		}
		got = fmt.Sprintf("%d canary, %d stable, %.2f%%", c, s, 100*float64(wc)/float64(wAll))
		return c == canaries && s == stables && math.Abs(100*float64(wc)/float64(wAll)-share) <= 0.5
	})
	r.t.Logf("weights: %s", got)
}

// abortCanary aborts the canary and checks that Deploy rolls it back.
func (r *reconciler) abortCanary(errc <-chan error) {
	r.t.Helper()
	if err := r.g.CanaryCommand(CanaryAbort); err != nil {
		r.t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, ErrRolledBack) {
			r.t.Fatalf("aborted canary: %v, want rolled back", err)
		}
	case <-time.After(5 * time.Second):
		r.t.Fatal("the aborted canary did not end")
	}
}

// TestCanaryScaleOutByWeight: a scale-out during a step by weight adds
// stable instances only, and the weights keep the canary's share of the
// requests; the scaling converges while the canary runs. A scale-in
// retires stable instances only, and never the last one.
func TestCanaryScaleOutByWeight(t *testing.T) {
	r := canaryReconciler(t, config.CanaryStep{Weight: 25, For: time.Hour})
	v2, errc := r.deployCanary()
	r.awaitStarts(4)
	r.serve("web-004")
	if v := r.versionOf("web-004"); v != v2 {
		t.Fatalf("the canary instance runs %q, want %s", v, v2)
	}
	r.awaitShare(v2, 25, 1, 3)
	if !r.g.CanaryTakesScaling() {
		t.Fatal("a canary in its step takes no scaling")
	}

	ctx := context.Background()
	m := r.g.Mark()
	if err := r.g.SetDesired(ctx, 5); err != nil {
		t.Fatal(err)
	}
	r.awaitStarts(6)
	r.serve("web-005", "web-006")
	for _, n := range []string{"web-005", "web-006"} {
		if v := r.versionOf(n); v == v2 {
			t.Fatalf("the scale-out started %s of the canary's version", n)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := r.g.WaitConverged(wctx, m); err != nil {
		t.Fatalf("a scale-out during a canary: %v", err)
	}
	r.awaitShare(v2, 25, 1, 5)

	// A scale-in takes stable instances, never the canary's.
	if why := r.g.CanaryScaleRefusal(0); !strings.Contains(why, "keeps at least 1 stable instance") {
		t.Fatalf("a scale to 0 during a canary: refusal %q", why)
	}
	if why := r.g.CanaryScaleRefusal(1); why != "" {
		t.Fatalf("a scale to 1 during a canary refused: %s", why)
	}
	m = r.g.Mark()
	if err := r.g.SetDesired(ctx, 1); err != nil {
		t.Fatal(err)
	}
	var retired []string
	for _, x := range r.g.Retirements(m) {
		retired = append(retired, x.Instance)
	}
	if len(retired) != 4 || strings.Contains(strings.Join(retired, " "), "web-004") {
		t.Fatalf("a scale-in to 1 during a canary retired %v; want 4 stable instances, not web-004", retired)
	}
	r.lb.drain()
	r.awaitShare(v2, 25, 1, 1)
	r.abortCanary(errc)
}

// TestCanaryScaleOutByInstances: a step by instance count (instances:
// 25%) gives every server the same weight, and a scale-out adds canary
// instances in proportion (ceil(5 × 25 %) = 2) beside the stable ones; a
// scale-in retires stable ones and leaves the canary's.
func TestCanaryScaleOutByInstances(t *testing.T) {
	r := canaryReconciler(t, config.CanaryStep{Instances: 25, For: time.Hour})
	v2, errc := r.deployCanary()
	r.awaitStarts(4)
	r.serve("web-004")
	r.awaitShare(v2, 25, 1, 3) // 1 of 4 servers

	ctx := context.Background()
	m := r.g.Mark()
	if err := r.g.SetDesired(ctx, 5); err != nil {
		t.Fatal(err)
	}
	r.awaitStarts(7)
	r.serve("web-005", "web-006", "web-007")
	n := map[string]int{}
	for _, name := range []string{"web-005", "web-006", "web-007"} {
		n[r.versionOf(name)]++
	}
	if n[v2] != 1 {
		t.Fatalf("a scale-out to 5 started %d canary instance(s) of 3 (%v), want 1 (2 canary of 5: 25%% rounded up)", n[v2], n)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := r.g.WaitConverged(wctx, m); err != nil {
		t.Fatalf("a scale-out during a canary: %v", err)
	}
	r.awaitShare(v2, 100*2.0/7, 2, 5)
	if st, ok := r.g.CanaryStatus(); !ok || st.Instances != 25 || math.Abs(st.Weight-28.6) > 0.05 || st.CanaryInstances != 2 {
		t.Fatalf("canary status %+v, want instances 25 and weight 28.6 (2 of 7)", st)
	}

	if err := r.g.SetDesired(ctx, 2); err != nil {
		t.Fatal(err)
	}
	r.lb.drain()
	r.awaitShare(v2, 50, 2, 2)
	r.abortCanary(errc)
}
