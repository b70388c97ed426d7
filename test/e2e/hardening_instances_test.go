package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/group"
	"github.com/shoal-lb/shoal/internal/haproxy"
	"github.com/shoal-lb/shoal/internal/jobrun"
	"github.com/shoal-lb/shoal/internal/proc"
)

// slowBackendEnv makes the test binary serve as an instance on the address
// it holds (see slowBackend).
const slowBackendEnv = "SHOAL_E2E_SLOW_BACKEND"

// slowBackend serves /healthz and /sleep?ms=N[&on=NAMES], which sends its
// headers (with X-Instance) at once and its body after N ms of wall time (on
// the instances named in on, when given), without the CPU that
// demo-backend's /work burns. It exits on SIGTERM.
func slowBackend(addr string) {
	name := os.Getenv("SHOAL_INSTANCE")
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("/sleep", func(w http.ResponseWriter, r *http.Request) {
		ms, _ := strconv.Atoi(r.URL.Query().Get("ms"))
		// on=NAME,NAME: only these instances sleep; the others answer at once.
		if on := r.URL.Query().Get("on"); on != "" && !slices.Contains(strings.Split(on, ","), name) {
			ms = 0
		}
		w.Header().Set("X-Instance", name)
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-time.After(time.Duration(ms) * time.Millisecond):
			io.WriteString(w, "done\n")
		case <-r.Context().Done():
		}
	})
	srv := &http.Server{Addr: addr, Handler: mux}
	go func() {
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		<-term
		os.Exit(0)
	}()
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, "slow backend:", err)
		os.Exit(2)
	}
}

// slowGroup runs slowBackend instances.
func slowGroup(t *testing.T, g groupSpec) groupSpec {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	g.Command = fmt.Sprintf("[%q]", exe)
	g.Env = fmt.Sprintf(`{%s: "127.0.0.1:{{.Port}}"}`, slowBackendEnv)
	return g
}

// TestHungInstanceIsReplaced (issue 12 item 4): an instance frozen with
// SIGSTOP fails its check; after replace_after it is stopped and replaced.
// Status never calls it in-service while HAProxy has it DOWN.
func TestHungInstanceIsReplaced(t *testing.T) {
	parallel(t)
	g := web
	g.Max = 2
	g.Plans = ""
	g.Extra = "    replace_after: 3s\n"
	e := newEnv(t, "", g)
	e.start()
	e.waitInService("web", 2)
	stop := load(t, e)
	time.Sleep(500 * time.Millisecond)

	victim := e.status().Groups[0].Instances[0]
	if err := syscall.Kill(victim.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	sawDown, sawUnhealthy := false, false
	var replacedAfter time.Duration
	e.eventually("the hung instance is replaced", 40*time.Second, func() error {
		s, err := e.client().Group(context.Background(), "web")
		if err != nil {
			return err
		}
		victimListed := false
		for _, in := range s.Instances {
			down := strings.HasPrefix(string(in.Health), "DOWN")
			if in.State == group.InService && down {
				t.Fatalf("status shows %s in-service while HAProxy has it %s", in.Name, in.Health)
			}
			if in.PID == victim.PID {
				victimListed = true
				sawDown = sawDown || down
				sawUnhealthy = sawUnhealthy || in.State == group.Unhealthy
			}
		}
		if victimListed {
			return fmt.Errorf("pid %d still listed", victim.PID)
		}
		if replacedAfter == 0 {
			replacedAfter = time.Since(stopped)
		}
		if s.InService != 2 || len(s.Instances) != 2 {
			return fmt.Errorf("%d in service of %d", s.InService, len(s.Instances))
		}
		return nil
	})
	res := stop()
	t.Logf("removed %v after SIGSTOP, back to 2 in service after %v; %d requests, %d failures %v",
		replacedAfter, time.Since(stopped), res.Requests, res.Failures, res.FailureSamples)
	if !sawDown || !sawUnhealthy {
		t.Errorf("status never showed the hung instance DOWN (%v) and unhealthy (%v)", sawDown, sawUnhealthy)
	}
	// HAProxy needs fall (2) × interval (300ms) to mark it DOWN; then
	// replace_after (3s). The rest is slack for a loaded machine.
	if replacedAfter < 3*time.Second || replacedAfter > 12*time.Second {
		t.Errorf("hung instance removed %v after SIGSTOP, want replace_after 3s + detection + slack (3s..12s)", replacedAfter)
	}
	// Only requests already sent to the instance when it froze can fail: one
	// per keep-alive connection. SIGCONT after SIGTERM lets it answer them.
	if res.Failures > loadConcurrency {
		t.Errorf("%d requests failed, want at most %d (those in flight at SIGSTOP): %v", res.Failures, loadConcurrency, res.FailureSamples)
	}
	if alive(victim.PID) {
		t.Errorf("hung instance pid %d is still running", victim.PID)
	}
	s := e.status().Groups[0]
	if len(s.LastFailures) == 0 || !strings.Contains(s.LastFailures[len(s.LastFailures)-1].Reason, "health check failing") {
		t.Errorf("status does not report why it was replaced: %+v", s.LastFailures)
	}
	e.checkInSync("web")
}

// TestInstanceChildrenStopWithIt (issue 12 item 5): what an instance forked
// is stopped when the instance dies, and a restarted core sweeps the orphans
// of an instance that died while no core ran.
func TestInstanceChildrenStopWithIt(t *testing.T) {
	parallel(t) // waits for processes to stop, no load
	g := web
	g.Min, g.Max, g.Plans = 1, 1, ""
	g.Command = fmt.Sprintf(`["/bin/sh", "-c", "sleep 1000 & exec %s --listen 127.0.0.1:{{.Port}} --name {{.Name}}"]`, filepath.Join(binDir, "demo-backend"))
	e := newEnv(t, "", g)
	e.start()
	e.waitInService("web", 1)

	// While the core runs: the leader dies, its child goes with it.
	first := e.status().Groups[0].Instances[0]
	if !proc.GroupRunning(first.PID) {
		t.Fatal("instance group not running")
	}
	if err := syscall.Kill(first.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	e.eventually("the dead instance's child is stopped", 15*time.Second, func() error {
		if proc.GroupRunning(first.PID) {
			return fmt.Errorf("process group %d still has members", first.PID)
		}
		return nil
	})
	e.waitInService("web", 1)

	// While no core runs: the orphan is found by its marker on restart.
	second := e.status().Groups[0].Instances[0]
	e.kill9()
	if err := syscall.Kill(second.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if !proc.GroupRunning(second.PID) {
		t.Fatal("the orphaned child is not running; the test proves nothing")
	}
	e.start()
	e.eventually("the orphaned child is swept", 15*time.Second, func() error {
		if proc.GroupRunning(second.PID) {
			return fmt.Errorf("process group %d still has members", second.PID)
		}
		return nil
	})
	e.waitInService("web", 1)
	e.stop()
	if left := e.ourProcesses(); len(left) > 0 {
		t.Fatalf("processes left after shoal stopped: %v", left)
	}
}

// TestFailedScaleUpStartsCooldown (issue 12 item 8): new instances that never
// pass their check fail the scale-up, which starts the scale-up cooldown; a
// second up is ignored for it instead of raising the group again.
func TestFailedScaleUpStartsCooldown(t *testing.T) {
	parallel(t)
	g := web
	g.Min, g.Max, g.Plans = 1, 4, ""
	g.CooldownUp = "1h"
	// web-001 serves its health check; later instances listen elsewhere, so
	// they run but never pass.
	g.Command = fmt.Sprintf(`[%q, "--listen", "127.0.0.1:{{if eq .Index 1}}{{.Port}}{{else}}0{{end}}", "--name", "{{.Name}}"]`, filepath.Join(binDir, "demo-backend"))
	g.Health = "{path: /healthz, interval: 300ms, rise: 2, fall: 2, timeout: 1s, grace: 3s}"
	e := newEnv(t, "", g)
	e.start()
	e.waitInService("web", 1)

	out, _, code := e.cli("scale", "web", "up", "--sync")
	if code == 0 {
		t.Fatalf("scale up of a broken release succeeded:\n%s", out)
	}
	list, err := e.client().Jobs(context.Background(), "web", 1)
	if err != nil {
		t.Fatal(err)
	}
	j := list[0]
	if j.State != jobrun.Failed || !strings.Contains(j.Reason, "health check did not pass") {
		t.Fatalf("first up: %+v; want failed because the check never passed", j)
	}
	s := e.status().Groups[0]
	if s.Desired != j.Target {
		t.Fatalf("desired size %d, but the failed job records target %d", s.Desired, j.Target)
	}
	if s.UpCooldown == nil || time.Until(*s.UpCooldown) < 50*time.Minute {
		t.Fatalf("no scale-up cooldown after the failed job: %v", s.UpCooldown)
	}

	out, _, _ = e.cli("scale", "web", "up")
	list, err = e.client().Jobs(context.Background(), "web", 1)
	if err != nil {
		t.Fatal(err)
	}
	if j2 := list[0]; j2.State != jobrun.Ignored || !strings.Contains(j2.Reason, "scale-up cooldown") {
		t.Fatalf("second up: %+v (%s); want ignored for the scale-up cooldown", j2, out)
	}
	if d := e.status().Groups[0].Desired; d != j.Target {
		t.Fatalf("desired size %d after the ignored up, want it to stay %d", d, j.Target)
	}
}

// slowRequest is a /sleep request through the balancer whose headers have
// arrived.
type slowRequest struct {
	instance string
	cancel   context.CancelFunc
	done     chan error // the body's outcome
}

// sendSlow sends /sleep?ms=ms requests until one lands on instance.
func sendSlow(t *testing.T, e *shoalEnv, instance string, ms int) *slowRequest {
	t.Helper()
	for range 20 {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("http://%s/sleep?ms=%d", e.listen, ms), nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		if got := resp.Header.Get("X-Instance"); got != instance {
			cancel()
			resp.Body.Close()
			continue
		}
		r := &slowRequest{instance: instance, cancel: cancel, done: make(chan error, 1)}
		go func() {
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err == nil && string(b) != "done\n" {
				err = fmt.Errorf("body %q", b)
			}
			r.done <- err
		}()
		t.Cleanup(cancel)
		return r
	}
	t.Fatalf("no request landed on %s", instance)
	return nil
}

// TestDrainResumesAfterCoreRestart (issue 12 item 9): a drain interrupted by
// kill -9 of the core resumes with what is left of drain_timeout: a request
// in flight completes, and the instance leaves HAProxy when the original
// drain_timeout ends, neither at the restart (as before: the unregistered
// server was put in maintenance and its requests cut 10s later) nor a full
// drain_timeout after it.
func TestDrainResumesAfterCoreRestart(t *testing.T) {
	parallel(t) // waits out windows on the clock: see the package doc
	const (
		drain    = 24 * time.Second
		coreDown = 6 * time.Second
	)
	g := slowGroup(t, groupSpec{Name: "web", Min: 1, Max: 2, Drain: "24s"})
	e := newEnv(t, "", g)
	e.start()
	e.waitInService("web", 1)
	scaleSync(t, e, "--size", "2")
	var victim group.InstanceStatus
	for _, in := range e.status().Groups[0].Instances {
		if in.Name == "web-002" {
			victim = in
		}
	}
	// short finishes within the drain but after a cut 10s past the restart;
	// long outlasts the drain.
	short := sendSlow(t, e, "web-002", 19000)
	long := sendSlow(t, e, "web-002", 60000)

	start := time.Now()
	if _, _, code := e.cli("scale", "web", "--size", "1"); code != 0 {
		t.Fatal("scale down refused")
	}
	e.eventually("web-002 drains", 5*time.Second, func() error {
		s, err := e.client().Group(context.Background(), "web")
		if err != nil {
			return err
		}
		for _, in := range s.Instances {
			if in.Name == "web-002" && in.State == group.Draining {
				return nil
			}
		}
		return errors.New("not draining")
	})

	// Watch HAProxy itself, which keeps running while the core is down, for
	// the moment web-002 goes to maintenance or away.
	left := make(chan time.Duration, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		hc := haproxy.Client{Socket: filepath.Join(e.stateDir(), "haproxy", "admin.sock")}
		for ctx.Err() == nil {
			cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
			stats, err := hc.Stats(cctx, "web")
			ccancel()
			if err == nil {
				gone := true
				for _, st := range stats {
					if st.Name == "web-002" && !strings.HasPrefix(string(st.Status), "MAINT") {
						gone = false
					}
				}
				if gone {
					left <- time.Since(start)
					return
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()

	time.Sleep(time.Second)
	e.kill9()
	time.Sleep(coreDown)
	e.start()

	var took time.Duration
	select {
	case took = <-left:
	case <-time.After(60 * time.Second):
		t.Fatal("web-002 never left HAProxy")
	}
	t.Logf("web-002 left HAProxy %v after the drain began (drain_timeout %v, core down %v)", took, drain, coreDown)
	if took < drain-time.Second || took > drain+5*time.Second {
		t.Fatalf("web-002 left HAProxy %v after the drain began; want the original drain_timeout %v, not the restart (~%v) nor a fresh drain_timeout after it (~%v)",
			took, drain, coreDown+time.Second, drain+coreDown+time.Second)
	}
	select {
	case err := <-short.done:
		if err != nil {
			t.Fatalf("the request in flight on the draining instance failed across the restart: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the short request did not complete")
	}
	long.cancel()
	e.waitInService("web", 1)
	if alive(victim.PID) {
		t.Fatalf("web-002 (pid %d) still runs after it left the group", victim.PID)
	}
	e.checkInSync("web")
}

// TestInstanceLogsRotatedAndExpired (issue 12 item 7): the core rotates an
// instance's log past instance_logs.max_size and deletes the logs of
// instances gone for longer than the retention.
func TestInstanceLogsRotatedAndExpired(t *testing.T) {
	parallel(t) // waits for rotation, no load
	g := web
	g.Min, g.Max, g.Plans = 1, 1, ""
	e := newEnv(t, "instance_logs: {max_size: 4KiB, keep: 1, retention: 1h}", g)
	logs := filepath.Join(e.stateDir(), "logs")
	if err := os.MkdirAll(logs, 0o700); err != nil {
		t.Fatal(err)
	}
	// web-001 appends to what an earlier run left: already over max_size.
	big := strings.Repeat("earlier run\n", 1000)
	if err := os.WriteFile(filepath.Join(logs, "web-001.log"), []byte(big), 0o600); err != nil {
		t.Fatal(err)
	}
	gone := filepath.Join(logs, "web-050.log")
	if err := os.WriteFile(gone, []byte("long gone\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-48 * time.Hour)
	if err := os.Chtimes(gone, old, old); err != nil {
		t.Fatal(err)
	}
	e.start()
	e.waitInService("web", 1)
	e.eventually("web-001.log is rotated", 20*time.Second, func() error {
		fi, err := os.Stat(filepath.Join(logs, "web-001.log"))
		if err != nil {
			return err
		}
		if fi.Size() >= int64(len(big)) {
			return fmt.Errorf("web-001.log is %d bytes", fi.Size())
		}
		b, err := os.ReadFile(filepath.Join(logs, "web-001.log.1"))
		if err != nil {
			return err
		}
		if !strings.HasPrefix(string(b), "earlier run\n") {
			return fmt.Errorf("web-001.log.1 starts %q", b[:min(len(b), 20)])
		}
		return nil
	})
	if _, err := os.Stat(gone); !os.IsNotExist(err) {
		t.Fatalf("the log of an instance gone for 48h survived a 1h retention: %v", err)
	}
}
