package group

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/canary"
	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/haproxy"
)

// blueGreen runs a group of two (web-001, web-002: blue) deployed blue/green
// with keepOld, and starts a deploy of a new version: its green set is
// web-003 and web-004, in service. It returns the deploy's end.
func blueGreen(t *testing.T, keepOld time.Duration) (*reconciler, <-chan error) {
	t.Helper()
	cfg := reconcilerConfig()
	cfg.Deploy = config.DefaultDeploy
	cfg.Deploy.Strategy, cfg.Deploy.BlueGreen = config.StrategyBlueGreen, &config.BlueGreen{KeepOld: keepOld}
	r := newReconcilerOf(t, cfg, 2, nil)
	r.awaitStarts(2)
	r.bringUp("web-001", "web-002")
	target := config.Template{StopTimeout: 5 * time.Second, Command: []string{"app", "--release", "2"}}
	errc := make(chan error, 1)
	go func() { errc <- r.g.Deploy(context.Background(), target, func(string) {}) }()
	waitFor(t, "green's starts", func() bool {
		if len(r.prov.startTimes()) >= 4 {
			return true
		}
		select {
		case err := <-errc:
			t.Fatalf("Deploy = %v before green started", err)
		default:
		}
		return false
	})
	// Their gates poll when the deploy's ticker ticks: three waiters.
	r.clk.awaitWaiters(t, r.clk.Now().Add(healthPoll), 3, "green's gates and the deploy's ticker")
	r.bringUp("web-003", "web-004")
	r.lb.mu.Lock()
	added := []int{r.lb.added["web-003"], r.lb.added["web-004"]}
	r.lb.mu.Unlock()
	if !slices.Equal(added, []int{haproxy.WeightOff, haproxy.WeightOff}) {
		t.Fatalf("green servers added at weights %v, want out of rotation (%d)", added, haproxy.WeightOff)
	}
	r.awaitPhase(canary.Switched)
	return r, errc
}

func (r *reconciler) awaitPhase(p canary.Phase) BlueGreenStatus {
	r.t.Helper()
	var st BlueGreenStatus
	waitFor(r.t, "phase "+string(p), func() bool {
		st, _ = r.g.BlueGreenStatus()
		return st.Phase == string(p)
	})
	return st
}

// lastWeights is the last line of weights HAProxy was sent.
func (r *reconciler) lastWeights() string {
	r.ev.mu.Lock()
	defer r.ev.mu.Unlock()
	for i := len(r.ev.all) - 1; i >= 0; i-- {
		if w, ok := strings.CutPrefix(r.ev.all[i], "weights "); ok {
			return w
		}
	}
	return ""
}

// TestBlueGreenSwitchThenRollback: the switch is one line, green's raises
// before blue's zeros; a rollback is one line the other way, blue first,
// then green is retired and the serving version stays.
func TestBlueGreenSwitchThenRollback(t *testing.T) {
	r, errc := blueGreen(t, time.Minute)
	blue := r.g.Version()
	waitFor(t, "the switch's weights", func() bool {
		return r.lastWeights() == "web-003 100, web-004 100, web-001 -1, web-002 -1"
	})
	st, _ := r.g.BlueGreenStatus()
	if st.GreenInstances != 2 || st.BlueInstances != 2 || st.GreenWeight != 100 || st.BlueWeight != 0 || st.KeepUntil == nil || !st.Running {
		t.Fatalf("status after the switch: %+v", st)
	}
	if err := r.g.CanaryCommand(CanaryPause); !errors.Is(err, ErrNoCanary) {
		t.Fatalf("a canary command during a blue/green deploy: %v", err)
	}
	if err := r.g.BlueGreenCommand(CanaryPause); !errors.Is(err, ErrUnsupportedAct) {
		t.Fatalf("pause of a blue/green deploy: %v", err)
	}
	if err := r.g.BlueGreenCommand(BlueGreenRollback); err != nil {
		t.Fatal(err)
	}
	// Returned once applied: blue takes every request already.
	if w := r.lastWeights(); w != "web-001 100, web-002 100, web-003 -1, web-004 -1" {
		t.Fatalf("right after the rollback returned: weights %s, want blue's at 100", w)
	}
	var err error
	waitFor(t, "the deploy's end", func() bool {
		select {
		case err = <-errc:
			return true
		default:
			r.clk.Advance(deployPoll)
			return false
		}
	})
	if !errors.Is(err, ErrRolledBack) || !strings.Contains(err.Error(), "rolled back by an operator while switched") {
		t.Fatalf("Deploy = %v", err)
	}
	for _, name := range []string{"web-003", "web-004"} {
		if _, ok := r.state(name); ok {
			t.Errorf("green %s still there after the rollback", name)
		}
	}
	if r.g.Version() != blue {
		t.Fatalf("serving %s after the rollback, want blue's %s", r.g.Version(), blue)
	}
	if st := r.awaitPhase(canary.RolledBack); st.Running || st.BlueInstances != 2 {
		t.Fatalf("status after the rollback: %+v", st)
	}
	if err := r.g.BlueGreenCommand(BlueGreenRollback); !errors.Is(err, ErrNoBlueGreen) {
		t.Fatalf("rollback after the end: %v", err)
	}
}

// TestBlueGreenKeepOldPasses: blue stays (out of rotation) until keep_old
// has passed, then green's version is the serving one and blue is retired.
func TestBlueGreenKeepOldPasses(t *testing.T) {
	r, errc := blueGreen(t, time.Minute)
	blue := r.g.Version()
	r.clk.Advance(30 * time.Second)
	if st, _ := r.g.BlueGreenStatus(); st.Phase != string(canary.Switched) || st.BlueInstances != 2 {
		t.Fatalf("half way through keep_old: %+v", st)
	}
	var err error
	waitFor(t, "the deploy's end", func() bool {
		select {
		case err = <-errc:
			return true
		default:
			r.clk.Advance(time.Second)
			return false
		}
	})
	if err != nil {
		t.Fatalf("Deploy = %v", err)
	}
	if r.g.Version() == blue {
		t.Fatal("blue still serving after keep_old")
	}
	for _, name := range []string{"web-001", "web-002"} {
		if _, ok := r.state(name); ok {
			t.Errorf("blue %s still there after keep_old", name)
		}
	}
	if st := r.awaitPhase(canary.Done); st.Reason != "keep_old passed" || st.GreenInstances != 2 {
		t.Fatalf("status when done: %+v", st)
	}
}
