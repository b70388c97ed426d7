package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/group"
)

// powerProvider is c.provider() with power_off and power_on: its servers
// can wait shut down in a warm pool.
func (c *execCloud) powerProvider() string {
	argv := func(args ...string) string {
		q := []string{strconv.Quote("sh"), strconv.Quote(c.script), strconv.Quote(c.dir)}
		for _, a := range args {
			q = append(q, strconv.Quote(a))
		}
		return "[" + strings.Join(q, ", ") + "]"
	}
	return c.provider() + fmt.Sprintf("    power_off: %s\n    power_on: %s\n", argv("power_off", "{{.ID}}"), argv("power_on", "{{.ID}}"))
}

// set writes the test cloud's knob file name (boot, resume).
func (c *execCloud) set(name string, v int) {
	c.t.Helper()
	if err := os.WriteFile(filepath.Join(c.dir, name), []byte(strconv.Itoa(v)), 0o644); err != nil {
		c.t.Fatal(err)
	}
}

// webStatus is group web's status.
func (e *shoalEnv) webStatus() group.Status {
	e.t.Helper()
	for _, g := range e.status().Groups {
		if g.Name == "web" {
			return g
		}
	}
	e.t.Fatal("no group web in shoal status")
	return group.Status{}
}

// waitWarm waits until web's warm pool has n servers, all warm, and
// returns them by server ID.
func (e *shoalEnv) waitWarm(n int, within time.Duration) map[string]string {
	e.t.Helper()
	var ids map[string]string
	e.eventually(fmt.Sprintf("a warm pool of %d", n), within, func() error {
		ids = map[string]string{}
		pool := e.webStatus().WarmPool
		for _, s := range pool {
			if s.State != "warm" {
				return fmt.Errorf("pool %+v", pool)
			}
			ids[s.ID] = s.Name
		}
		if len(pool) != n {
			return fmt.Errorf("pool %+v", pool)
		}
		return nil
	})
	return ids
}

// poolMatches fails unless the cloud's servers are exactly web's
// instances and its warm pool's members: no orphan, none twice, and every
// pool member shut down.
func (c *execCloud) poolMatches(e *shoalEnv, instances, pool int) error {
	st := e.webStatus()
	want := map[string]string{}
	for _, in := range st.Instances {
		want[in.CloudID] = "instance " + in.Name
	}
	for _, s := range st.WarmPool {
		if s.State != "warm" {
			return fmt.Errorf("pool member %s is %s", s.Name, s.State)
		}
		if _, dup := want[s.ID]; dup {
			return fmt.Errorf("server %s is both %s and a pool member", s.ID, want[s.ID])
		}
		want[s.ID] = "pool " + s.Name
	}
	got := map[string]string{}
	for _, s := range c.servers() {
		got[s.ID] = want[s.ID]
		if got[s.ID] == "" {
			got[s.ID] = "orphan " + s.Tags["shoal-instance"]
		}
		if strings.HasPrefix(got[s.ID], "pool ") && s.PID != 0 {
			return fmt.Errorf("pool member %s runs (pid %d)", s.ID, s.PID)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || len(st.Instances) != instances || len(st.WarmPool) != pool {
		return fmt.Errorf("cloud servers %v; shoal's instances and pool %v; want %d and %d", got, want, instances, pool)
	}
	return nil
}

// TestExecCloudWarmPool: the exec test cloud's servers boot for 6 s after a
// create and 1 s after a power-on. Under keep-alive load, a scale-out
// without a pool waits for a create's boot; with warm_pool {size: 2,
// state: stopped} (added by a reload) it takes a shut-down server, and is
// in service within its boot from stopped plus the health gate, both
// measured in this test. The pool refills in the background; shoal
// killed -9 mid-refill adopts the pool's servers at its restart (no
// orphan, nothing created twice); `shoal status` shows the pool; a
// scale-in returns its servers to a pool with room (reuse_on_scale_in)
// and deletes them when it is full; a stopping shoal deletes the pool. No request fails, the CPU saturated from the
// kill on.
func TestExecCloudWarmPool(t *testing.T) {
	parallel(t) // mostly waits on polls and boots: see the package doc
	const boot, resume = 6, 1
	c := newExecCloud(t)
	c.set("boot", boot)
	c.set("resume", resume)
	prov := c.powerProvider()
	g := web
	g.Extra, g.Cloud = "    provider: cli\n", true
	e := newEnv(t, prov, g)
	e.start()
	e.waitInService("web", 2)

	// timedScale scales web to n and returns how long the new instance
	// took to go into service (the scale job ends then).
	timedScale := func(n int) time.Duration {
		t.Helper()
		begin := time.Now()
		scaleSync(t, e, "--size", strconv.Itoa(n))
		return time.Since(begin)
	}
	alone(t) // the two scale-outs are measured
	stop := load(t, e)
	cold := timedScale(3)
	e.checkInSync("web")
	scaleSync(t, e, "--size", "2")

	g.Extra = "    provider: cli\n    warm_pool: {size: 2, state: stopped, reuse_on_scale_in: true}\n"
	e.writeConfig(prov, g)
	e.reload()
	pool := e.waitWarm(2, 60*time.Second)
	warm := timedScale(3)
	e.checkInSync("web")

	// What a cold scale-out spent beyond its boot is the health gate (and
	// the job's own steps, the same for both). The pool's take waits for
	// one listing more than a create (power_on, then a listing that shows
	// it running: at most an interval, 300 ms, and the command itself),
	// hence the second of slack.
	gate := cold - boot*time.Second
	t.Logf("time to in service: %s without a pool, %s from the warm pool; health gate and overheads %s; boot %ds, from stopped %ds",
		cold.Round(time.Millisecond), warm.Round(time.Millisecond), gate.Round(time.Millisecond), boot, resume)
	if limit := resume*time.Second + gate + time.Second; warm > limit {
		t.Errorf("from the warm pool in %s, want at most its boot from stopped (%ds) + the health gate (%s) + 1 s (a listing and power_on)", warm, resume, gate)
	}
	if warm > cold/2 {
		t.Errorf("from the warm pool in %s, not clearly shorter than without one (%s)", warm, cold)
	}
	st := e.webStatus()
	taken := 0
	for _, in := range st.Instances {
		if _, ok := pool[in.CloudID]; ok {
			taken++
		}
	}
	if taken != 1 {
		t.Errorf("%d instances run on servers of the pool %v, want 1: %+v", taken, pool, st.Instances)
	}

	// From here the CPU is saturated too: the kill -9, the adoption and
	// the scale-in fail no request either.
	stopHogs := cpuHogs(t, runtime.NumCPU()+1, 3*time.Minute)
	defer stopHogs()

	// Refilling: a server being created and booting (6 s). kill -9 now.
	e.eventually("the pool refilling", 10*time.Second, func() error {
		for _, s := range e.webStatus().WarmPool {
			if s.State != "warm" {
				return nil
			}
		}
		return fmt.Errorf("pool %+v", e.webStatus().WarmPool)
	})
	before := len(c.servers())
	creates := c.calls()["start"]
	e.kill9()
	e.start()
	e.waitInService("web", 3)
	e.eventually("the instances and the refilled pool, no orphan", 60*time.Second, func() error { return c.poolMatches(e, 3, 2) })
	if n := c.calls()["start"]; n > creates+1 || before < 5 {
		// At most the server whose create the kill cut short is created again.
		t.Errorf("%d creates after the restart (%d before, %d servers at the kill): the killed run's pool servers were not adopted", n-creates, creates, before)
	}
	if out, _, _ := e.cli("status"); !strings.Contains(out, "warm pool 2") {
		t.Errorf("shoal status does not show the warm pool:\n%s", out)
	}
	e.checkInSync("web")

	// A full pool: scale-in deletes (reuse only when it has room).
	scaleSync(t, e, "--size", "2")
	e.eventually("2 instances and the pool of 2", 30*time.Second, func() error { return c.poolMatches(e, 2, 2) })

	// Room in the pool: a scale-out takes both warm servers, and while
	// the pool refills (slowly now), a scale-in returns its two servers to
	// it instead of deleting them; the refill's surplus is deleted.
	c.set("boot", 15)
	scaleSync(t, e, "--size", "4")
	scaleSync(t, e, "--size", "2")
	if n := strings.Count(e.log.String(), "server returned to the warm pool"); n != 2 {
		t.Errorf("%d servers returned to the warm pool by the scale-in, want 2", n)
	}
	e.eventually("2 instances and the pool of 2 again", 60*time.Second, func() error { return c.poolMatches(e, 2, 2) })
	res := stop()
	stopHogs()
	checkNoFailures(t, "scaling with a warm pool, kill -9 and adoption with the CPU saturated", res)

	e.stop()
	if left := c.servers(); len(left) > 0 {
		t.Fatalf("servers left in the cloud after shoal stopped: %v", left)
	}
}
