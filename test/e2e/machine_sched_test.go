package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// machine is how the suite's tests share this machine. Every test starts
// its own shoal, HAProxy, instances and hosts (free ports, namespaces and
// cgroups of its own), so most run side by side: parallel. A step that
// saturates every CPU on purpose, or whose assertions are figures of the
// machine (throughput, CPU, latency weights, outage bounds), runs alone,
// so its load pushes no other test past its bounds and no other test
// skews its figures. Call parallel or exclusive once in a test's tree
// (a test whose subtests run side by side calls t.Parallel itself and
// parallel or exclusive in each subtest).
//
// Steps that run alone are batched, not interleaved: a test that asks to
// run alone waits in line while parallel tests keep starting; when no
// parallel test is running (every slot holds a test in line, or none is
// left to start), the line runs one test at a time and new parallel tests
// wait until it is empty. A test back from its alone step (shareAgain)
// rejoins the parallel ones. Before, each alone step stopped new tests and
// waited for every running one to end: the machine idled through each.
//
//	            parallel ──► shared ──alone──► in line ──(no shared test)──► alone
//	                           ▲           busy                                 │
//	                           └──────────────── shareAgain ◄──────────────────┘
//	exclusive ──► in line ──► alone ──► end
//
// A busy step (busy, exclusiveBusy) saturates the cores with busy loops and
// asserts that nothing fails: it runs alone too, but beside up to mostBusy-1
// other busy steps, and their loops are the machine's, shared (cpuHogs in a
// busy step asks hogs for them): as many as the most any of them asks for,
// not the sum, so that each step's own processes meet the contention they
// would alone, plus the other steps' work. Busy steps in line go before
// steps alone; a step alone waits until no busy step runs.
//
// Parallel tests start longest first (slowFirst), so that no long one
// starts last and runs on alone at the end; the tests with a step alone
// start last (aloneLast): in line, a test's shoal, HAProxy and instances
// idle until the shared tests are done, and twenty such took a part of the
// machine from them. A test whose shared part before its alone step is
// long starts first all the same: the line waits for it (in one run
// TestGroupAcrossProviders' two minutes of back-offs held the line a
// minute and a half while twenty-two tests waited in it).
//
// make test runs the packages' tests beside the suite's shared part
// (scripts/test.sh): while the file SHOAL_E2E_LINE_AFTER names exists, the
// line does not run (lineHeld), so that no step alone runs beside them,
// and aloneLast's tests do not start (they would wait in line meanwhile);
// once it is gone, they start before the line runs.
var machine = &sched{most: 8, mostBusy: 3, hogs: hogPool{life: 5 * time.Minute}}

// slowFirst names the tests whose shared part takes longest (measured from
// make test's -json events), longest first; aloneLast those with a step
// alone and a short way to it, the longest to reach it first. The others
// start between, in go test's order.
var (
	slowFirst = []string{
		"TestGroupAcrossProviders", "TestLifetimeRecycle", "TestContainerGroup",
		"TestHAPairRecycleCordon", "TestContainerGroupOnSSHHost", "TestScaleOnPrometheus",
		"TestOutlierEjectionSurvivesRestart", "TestAutoscaleStabilizationGap", "TestGettingStartedGuide",
		"TestAutoscaleRestartKeepsHistory", "TestHungInstanceRequestsAnswered", "TestSSHHostsScaleFailRecover",
		"TestContainerKillDuringPull", "TestDrainResumesAfterCoreRestart",
		"TestEC2MotoScaleKillRestart", "TestCloudPolicyScalesOutAndIn", "TestEC2MotoSubnetsSpread",
	}
	// aloneLast's first notHeld start beside the packages' tests all the
	// same: their set-up (a 20 s warmup, an HA pair) would hold the line
	// 23 s once the packages are done, the others' 14 s at most.
	aloneLast = []string{
		"TestPerInstanceRateAfterScaleOut", "TestHAPairCrash", "TestBlueGreenSwitchRollbackAndKill",
		"TestQueueLimits", "TestHAPair", "TestDashboardMarksEjected", "TestExecCloudWarmPool",
		"TestDashboard", "TestSSHWarmPoolRunning", "TestSSHHostDrainResume",
		"TestInstancesActsUnderCPUContention", "TestSimulateMeasuresCapacity",
		"TestCanaryRolledBackOnP99", "TestCanaryRolledBackOnErrors", "TestCanaryPromotedCPUSaturated",
		"TestRestartWithChangedHAProxyConfig", "TestReloadsUnderCPUContentionTLS", "TestSSHConsolidation",
		"TestLatencyWeightedThroughRamp", "TestReloadsUnderCPUContention", "TestDashboardDayOps",
	}
	notHeld = 2
)

// busyLongFirst names the busy steps longest first (measured from make
// test's -json events: 42 s down to 6 s): in line the longest go first, so
// that the steps side by side end near together, not the longest running
// on by itself last (in one run 22 s of the line's 100 s of busy steps).
var busyLongFirst = []string{
	"TestReloadsUnderCPUContention", "TestCanaryPromotedCPUSaturated", "TestReloadsUnderCPUContentionTLS",
	"TestBlueGreenSwitchRollbackAndKill", "TestSSHHostDrainResume", "TestScaleFromZeroReloadWhileHeld",
	"TestLifetimeRecycle", "TestInstancesActsUnderCPUContention", "TestContainerGroup", "TestQueueLimits",
	"TestRestartWithChangedHAProxyConfig",
}

// busyOrder ranks a test's busy step in line: busyLongFirst's, then the
// others.
func busyOrder(test string) int {
	top, _, _ := strings.Cut(test, "/")
	if i := slices.Index(busyLongFirst, top); i >= 0 {
		return i
	}
	return len(busyLongFirst)
}

// startRank is a test's rank to start, lowest first: a test back from its
// alone step (-1: its instances run), slowFirst's, the others, aloneLast's.
func startRank(test string) int {
	top, _, _ := strings.Cut(test, "/")
	if i := slices.Index(slowFirst, top); i >= 0 {
		return i
	}
	if i := slices.Index(aloneLast, top); i >= 0 {
		return len(slowFirst) + 1 + i
	}
	return len(slowFirst)
}

type sched struct {
	mu      sync.Mutex
	cond    sync.Cond
	shared  int            // tests running side by side now
	line    []*machineHold // tests waiting to run alone, first first
	holder  *machineHold   // the test running alone, if any
	busyNow int            // busy steps running side by side now
	// mostBusy is how many busy steps run side by side (0: one).
	mostBusy int
	hogs     hogPool
	// most is how many tests run side by side at once (0: no bound). go
	// test's -parallel (make test: 512) is larger than the suite, so that
	// every test waits here, in rank, and those in line take no slot.
	most int
	// waiting holds the ranks of the tests waiting to start, in the order
	// they asked: the lowest starts first.
	waiting []*int
	// lineHeld keeps the line from running while something outside the
	// suite shares the machine (make test's packages' tests); tests of
	// rank heldFrom or later do not start then either (0: all start): they
	// would only wait in line, their shoal and instances running (set up
	// once the suite's other tests were done, beside the packages' last
	// ones, they made those take 470 s instead of 350 s).
	lineHeld bool
	heldFrom int
}

// machineHold is how one test holds machine now: alone (busy: as a busy
// step), or (done) no longer at all, its alone step over as its clean-up
// began. order ranks a busy step in line (busyLongFirst).
type machineHold struct {
	alone, busy, done bool
	order             int
}

// holds maps a test to its machineHold.
var holds sync.Map

func (s *sched) lock() {
	s.mu.Lock()
	if s.cond.L == nil {
		s.cond.L = &s.mu
	}
}

// lineRuns says the machine belongs to the line: someone is in it, no
// parallel test runs, and no test held back by holdLineWhile waits to
// start. Parallel tests wait until it is empty. Once the hold ends, the
// held tests set up first, so that the line waits for them once, not again
// after its first steps (22 s in make test, with the first steps' 14 s
// before it).
func (s *sched) lineRuns() bool {
	return len(s.line) > 0 && s.shared == 0 && !s.lineHeld &&
		!(s.heldFrom > 0 && slices.ContainsFunc(s.waiting, func(w *int) bool { return *w >= s.heldFrom }))
}

// holdLineWhile holds the line, and the start of tests of rank from or
// later, while the file at path exists, looking each half second until ctx
// ends.
func (s *sched) holdLineWhile(ctx context.Context, path string, from int) {
	exists := func() bool { _, err := os.Stat(path); return err == nil }
	s.lock()
	s.lineHeld, s.heldFrom = exists(), from
	held := s.lineHeld
	s.mu.Unlock()
	if !held {
		return
	}
	go func() {
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
			case <-tick.C:
				if exists() {
					continue
				}
			}
			s.lock()
			s.lineHeld = false
			s.cond.Broadcast()
			s.mu.Unlock()
			return
		}
	}()
}

// join waits until parallel tests may run and no test of a lower rank
// waits to start, then counts one more.
func (s *sched) join(rank int) {
	s.lock()
	defer s.mu.Unlock()
	me := &rank
	s.waiting = append(s.waiting, me)
	for s.holder != nil || s.busyNow > 0 || s.lineRuns() || (s.lineHeld && s.heldFrom > 0 && rank >= s.heldFrom) ||
		(s.most > 0 && s.shared >= s.mostAt(rank)) || s.ahead(me) {
		s.cond.Wait()
	}
	s.waiting = slices.DeleteFunc(s.waiting, func(w *int) bool { return w == me })
	s.shared++
	s.cond.Broadcast() // the next in rank may start too
}

// mostAt is how many tests run side by side when one of rank starts: most,
// or twice that for the tests held until the packages were done. Those
// start once the rest of the suite is in line, and their short set-up is
// all that runs while the line waits for them (eight at a time, it took
// 22 s at half the machine).
func (s *sched) mostAt(rank int) int {
	if s.heldFrom > 0 && rank >= s.heldFrom {
		return 2 * s.most
	}
	return s.most
}

// ahead says a test of a lower rank than me, or of its rank and earlier,
// waits to start.
func (s *sched) ahead(me *int) bool {
	before := true
	for _, w := range s.waiting {
		switch {
		case w == me:
			before = false
		case *w < *me || (*w == *me && before):
			return true
		}
	}
	return false
}

// leaveShared counts one fewer parallel test.
func (s *sched) leaveShared() {
	s.shared--
	s.cond.Broadcast()
}

// queue puts st in line and waits for its turn to run alone.
func (s *sched) queue(st *machineHold) {
	s.line = append(s.line, st)
	s.cond.Broadcast()
	for !s.mayRun(st) {
		s.cond.Wait()
	}
	s.line = slices.DeleteFunc(s.line, func(h *machineHold) bool { return h == st })
	if st.busy {
		s.busyNow++
	} else {
		s.holder = st
	}
	st.alone = true
	s.cond.Broadcast() // the next busy step may run beside st
}

// mayRun says st's turn has come: the line runs, no step alone runs, and
// st is the next of its kind in line (a step alone: the first; a busy
// step: the lowest order, then the first); a busy step then runs beside
// fewer than mostBusy others, a step alone once no busy step runs or waits.
func (s *sched) mayRun(st *machineHold) bool {
	if !s.lineRuns() || s.holder != nil {
		return false
	}
	var next *machineHold
	for _, h := range s.line {
		if h.busy == st.busy && (next == nil || (h.busy && h.order < next.order)) {
			next = h
		}
	}
	if next != st {
		return false
	}
	if st.busy {
		return s.busyNow < max(1, s.mostBusy)
	}
	return s.busyNow == 0 && !slices.ContainsFunc(s.line, func(h *machineHold) bool { return h.busy })
}

// release ends st's alone step: the next in line runs, or, the line
// empty, parallel tests start again.
func (s *sched) release(st *machineHold) {
	if st.busy {
		s.busyNow--
	} else {
		s.holder = nil
	}
	st.alone = false
	s.cond.Broadcast()
}

func parallel(t *testing.T) {
	t.Helper()
	t.Parallel()
	began := time.Now()
	machine.join(startRank(t.Name()))
	t.Logf("machine: shared after %s", time.Since(began).Round(time.Millisecond))
	st := &machineHold{order: busyOrder(t.Name())}
	holds.Store(t, st)
	t.Cleanup(func() { // registered first: runs after the test's own cleanups
		holds.Delete(t)
		machine.lock()
		defer machine.mu.Unlock()
		switch {
		case st.alone:
			machine.release(st)
		case !st.done:
			machine.leaveShared()
		}
	})
}

// alone turns a parallel test exclusive from the step that measures on,
// until shareAgain or its end: what comes before (starting nodes,
// instances, load) runs beside the others.
func alone(t *testing.T) {
	t.Helper()
	holdAlone(t, false)
}

// busy is alone for a step that saturates the CPU (cpuHogs) and asserts
// nothing of the machine's figures: it may run beside other busy steps.
func busy(t *testing.T) {
	t.Helper()
	holdAlone(t, true)
}

func holdAlone(t *testing.T, busy bool) {
	t.Helper()
	st := holdOf(t)
	if st.alone {
		return
	}
	st.busy = busy
	began := time.Now()
	machine.lock()
	machine.leaveShared()
	machine.queue(st)
	machine.mu.Unlock()
	t.Logf("machine: %s after %s", st.kind(), time.Since(began).Round(time.Millisecond))
	// The step ends where the test's clean-up begins: what it set up before
	// (shoal, HAProxy, instances) stops beside the next in line. What it
	// started since (load, CPU hogs) stops first: cleanups run last first.
	t.Cleanup(func() {
		machine.lock()
		defer machine.mu.Unlock()
		if st.alone {
			machine.release(st)
			st.done = true
		}
	})
}

// shareAgain ends a test's alone step: what follows (waiting out a
// back-off, a window, a clean-up) runs beside the others again.
func shareAgain(t *testing.T) {
	t.Helper()
	st := holdOf(t)
	if !st.alone {
		return
	}
	machine.lock()
	machine.release(st)
	machine.mu.Unlock()
	t.Logf("machine: shared again")
	machine.join(-1)
}

// kind names how st holds the machine in the test's log.
func (st *machineHold) kind() string {
	if st.busy {
		return "busy"
	}
	return "alone"
}

// hogPool is busy loops (cpuHogs): a test's own, or the machine's for the
// busy steps that run side by side, as many as the most one of them asks
// for. Each loop runs under timeout(1) for life at most (the machine's:
// longer than any step's lifetime), so that none outlives this test binary
// by long, a -timeout panic running no cleanup.
type hogPool struct {
	life time.Duration
	mu   sync.Mutex
	want map[*int]int // hogs each request asks for
	cmds []*exec.Cmd
}

// request asks for n loops for lifetime at most; stop (also at t's end)
// ends the request, and the loops no other request needs.
func (p *hogPool) request(t *testing.T, n int, lifetime time.Duration) (stop func()) {
	t.Helper()
	key := new(int)
	p.mu.Lock()
	if p.want == nil {
		p.want = map[*int]int{}
	}
	p.want[key] = n
	err := p.adjustLocked()
	p.mu.Unlock()
	stop = sync.OnceFunc(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		delete(p.want, key)
		_ = p.adjustLocked()
	})
	timer := time.AfterFunc(lifetime, stop)
	t.Cleanup(func() {
		timer.Stop()
		stop()
	})
	if err != nil {
		t.Fatalf("start a CPU hog: %v", err)
	}
	return stop
}

func (p *hogPool) adjustLocked() error {
	most := 0
	for _, n := range p.want {
		most = max(most, n)
	}
	for len(p.cmds) > most {
		c := p.cmds[len(p.cmds)-1]
		p.cmds = p.cmds[:len(p.cmds)-1]
		// The loop's group, timeout(1) and its shell: a SIGTERM that
		// reached timeout as it started could leave the shell looping on.
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		_ = c.Wait()
	}
	for len(p.cmds) < most {
		c := exec.Command("timeout", strconv.Itoa(int(p.life.Seconds())), "/bin/sh", "-c", "while :; do :; done")
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := c.Start(); err != nil {
			return err
		}
		p.cmds = append(p.cmds, c)
	}
	return nil
}

// runsBusy says t runs a busy step now.
func runsBusy(t *testing.T) bool {
	v, ok := holds.Load(t)
	if !ok {
		return false
	}
	st := v.(*machineHold)
	machine.lock()
	defer machine.mu.Unlock()
	return st.busy && st.alone
}

func holdOf(t *testing.T) *machineHold {
	t.Helper()
	v, ok := holds.Load(t)
	if !ok {
		t.Fatal("the test did not call parallel")
	}
	return v.(*machineHold)
}

func exclusive(t *testing.T) {
	t.Helper()
	exclusiveAs(t, false)
}

// exclusiveBusy is exclusive for a test that saturates the CPU (cpuHogs):
// it runs as a busy step.
func exclusiveBusy(t *testing.T) {
	t.Helper()
	exclusiveAs(t, true)
}

func exclusiveAs(t *testing.T, busy bool) {
	t.Helper()
	t.Parallel()
	began := time.Now()
	st := &machineHold{busy: busy, order: busyOrder(t.Name())}
	holds.Store(t, st)
	t.Cleanup(func() { holds.Delete(t) })
	machine.lock()
	machine.queue(st)
	machine.mu.Unlock()
	t.Logf("machine: %s after %s", st.kind(), time.Since(began).Round(time.Millisecond))
	t.Cleanup(func() {
		machine.lock()
		machine.release(st)
		machine.mu.Unlock()
	})
}

// TestMachineSchedBatchesAloneSteps drives a sched of its own: a test in
// line does not stop parallel tests from starting; it runs once none is
// running, never beside one; and the line runs one at a time.
func TestMachineSchedBatchesAloneSteps(t *testing.T) {
	parallel(t)
	s := &sched{}
	var mu sync.Mutex
	sharedNow, aloneNow, maxAlone := 0, 0, 0
	var bad []string
	enter := func(alone bool) {
		mu.Lock()
		defer mu.Unlock()
		if alone {
			aloneNow++
			maxAlone = max(maxAlone, aloneNow)
			if sharedNow > 0 {
				bad = append(bad, "an alone step ran beside a parallel test")
			}
		} else {
			sharedNow++
			if aloneNow > 0 {
				bad = append(bad, "a parallel test ran beside an alone step")
			}
		}
	}
	leave := func(alone bool) {
		mu.Lock()
		defer mu.Unlock()
		if alone {
			aloneNow--
		} else {
			sharedNow--
		}
	}

	// One parallel test runs; another asks to run alone and waits in line.
	s.join(0)
	enter(false)
	inLine := make(chan struct{})
	ranAlone := make(chan struct{})
	go func() {
		s.join(0)
		enter(false)
		leave(false)
		s.lock()
		close(inLine)
		s.leaveShared()
		st := &machineHold{}
		s.queue(st)
		s.mu.Unlock()
		enter(true)
		time.Sleep(20 * time.Millisecond)
		leave(true)
		s.lock()
		s.release(st)
		s.mu.Unlock()
		close(ranAlone)
	}()
	<-inLine
	// A new parallel test still starts while the line waits.
	started := make(chan struct{})
	go func() { s.join(0); close(started) }()
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("a parallel test could not start while a test waited in line")
	}
	enter(false)
	select {
	case <-ranAlone:
		t.Fatal("the alone step ran while parallel tests ran")
	case <-time.After(100 * time.Millisecond):
	}
	for range 2 { // both parallel tests end: the line runs
		leave(false)
		s.lock()
		s.leaveShared()
		s.mu.Unlock()
	}
	select {
	case <-ranAlone:
	case <-time.After(5 * time.Second):
		t.Fatal("the line did not run once no parallel test ran")
	}

	// Three in line at once, then released: one at a time.
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := &machineHold{}
			s.lock()
			s.queue(st)
			s.mu.Unlock()
			enter(true)
			time.Sleep(10 * time.Millisecond)
			leave(true)
			s.lock()
			s.release(st)
			s.mu.Unlock()
		}()
	}
	wg.Wait()
	s.join(0) // the line is empty: parallel tests start again
	if len(bad) > 0 || maxAlone != 1 {
		t.Fatalf("%v; at most %d alone at once, want 1", bad, maxAlone)
	}

	// At most most side by side: the next waits for one to end.
	s.lock()
	s.most = 1
	s.mu.Unlock()
	second := make(chan struct{})
	go func() { s.join(0); close(second) }()
	select {
	case <-second:
		t.Fatal("a second parallel test started beside the one most allows")
	case <-time.After(100 * time.Millisecond):
	}
	// Waiting to start, the lower rank goes first, whenever it asked.
	ranked := make(chan int, 2)
	for i, r := range []int{5, 2} {
		go func() { s.join(r); ranked <- r }()
		for { // r waits (behind the second) before the next asks
			s.lock()
			n := len(s.waiting)
			s.mu.Unlock()
			if n == i+2 {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	s.lock()
	s.leaveShared()
	s.mu.Unlock()
	select {
	case <-second:
	case <-time.After(5 * time.Second):
		t.Fatal("the second parallel test did not start when the first ended")
	}
	s.lock()
	s.leaveShared()
	s.mu.Unlock()
	if first := <-ranked; first != 2 {
		t.Fatalf("the test of rank %d started first; want rank 2 before rank 5", first)
	}
	s.lock()
	s.leaveShared()
	s.mu.Unlock()
	<-ranked
}

// TestMachineSchedLineHeld: while the file named exists (make test's
// packages' tests run), a test of the held ranks does not start, and a test
// in line waits though no parallel test runs; once it is gone, the held
// test starts, and the line runs once it has left.
func TestMachineSchedLineHeld(t *testing.T) {
	parallel(t)
	path := filepath.Join(t.TempDir(), "packages.running")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := &sched{}
	s.holdLineWhile(ctx, path, 5)
	var started atomic.Int32
	for _, rank := range []int{4, 5} {
		go func() {
			s.join(rank)
			started.Add(int32(rank))
		}()
	}
	waitStarted := func(want int32, what string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for started.Load() != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: ranks started sum to %d, want %d", what, started.Load(), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitStarted(4, "rank 4 starts")
	s.lock()
	s.leaveShared() // the rank 4 test ends
	s.mu.Unlock()
	ran := make(chan struct{})
	go func() {
		st := &machineHold{}
		s.lock()
		s.queue(st)
		s.release(st)
		s.mu.Unlock()
		close(ran)
	}()
	select {
	case <-ran:
		t.Fatal("the line ran while the file existed")
	case <-time.After(1200 * time.Millisecond):
	}
	if n := started.Load(); n != 4 {
		t.Fatalf("rank 5 started while the line was held (sum %d)", n)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	// The held test starts first; the line runs once it has left.
	waitStarted(9, "rank 5 starts once the file is gone")
	select {
	case <-ran:
		t.Fatal("the line ran beside the test held until the file was gone")
	case <-time.After(300 * time.Millisecond):
	}
	s.lock()
	s.leaveShared() // the rank 5 test reaches its step alone
	s.mu.Unlock()
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		t.Fatal("the line did not run once the file was gone and the held test had left")
	}
}

// TestMachineSchedHeldStartWider: a test of the held ranks starts beside
// twice most others, a test of another rank beside most.
func TestMachineSchedHeldStartWider(t *testing.T) {
	parallel(t)
	s := &sched{most: 1, heldFrom: 5}
	s.join(0)
	started := make(chan int, 2)
	go func() { s.join(5); started <- 5 }()
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("a held test did not start beside one other with most 1")
	}
	go func() { s.join(4); started <- 4 }()
	select {
	case <-started:
		t.Fatal("a test of rank 4 started beside two others with most 1")
	case <-time.After(300 * time.Millisecond):
	}
	for range 2 {
		s.lock()
		s.leaveShared()
		s.mu.Unlock()
	}
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("the test of rank 4 did not start once the others had left")
	}
}

// TestMachineSchedBusyStepsBatch: busy steps run side by side, at most
// mostBusy at once, lowest order first, never beside a step alone; a step
// alone waits until no busy step runs or waits, though it came first.
func TestMachineSchedBusyStepsBatch(t *testing.T) {
	parallel(t)
	s := &sched{mostBusy: 2}
	var mu sync.Mutex
	busyNow, mostBusy, aloneNow := 0, 0, 0
	var order []string
	var bad []string
	run := func(name string, busy bool, rank int, ready chan<- struct{}) {
		st := &machineHold{busy: busy, order: rank}
		s.lock()
		s.queue(st)
		s.mu.Unlock()
		mu.Lock()
		order = append(order, name)
		if busy {
			busyNow++
			mostBusy = max(mostBusy, busyNow)
		} else {
			aloneNow++
		}
		if aloneNow > 0 && busyNow > 0 || aloneNow > 1 {
			bad = append(bad, name+" ran beside a step alone")
		}
		mu.Unlock()
		time.Sleep(150 * time.Millisecond)
		mu.Lock()
		if busy {
			busyNow--
		} else {
			aloneNow--
		}
		mu.Unlock()
		s.lock()
		s.release(st)
		s.mu.Unlock()
		close(ready)
	}
	// One parallel test runs while four get in line: a step alone first,
	// then busy steps, the longest (lowest order) last.
	s.join(0)
	var done []chan struct{}
	for i, b := range []bool{false, true, true, true} {
		ch := make(chan struct{})
		done = append(done, ch)
		go run(fmt.Sprintf("%d", i), b, 3-i, ch)
		for { // each is in line before the next
			s.lock()
			n := len(s.line)
			s.mu.Unlock()
			if n == i+1 {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	s.lock()
	s.leaveShared()
	s.mu.Unlock()
	for _, ch := range done {
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatal("the line did not run out")
		}
	}
	if len(bad) > 0 || mostBusy != 2 || order[3] != "0" || order[2] != "1" {
		t.Fatalf("%v; at most %d busy at once, want 2; order %v, want 3 and 2 first (lowest order), then 1, the step alone last", bad, mostBusy, order)
	}
}

// TestHogPoolMostNotSum: busy steps side by side get as many busy loops as
// the most one asks for; they end with the last request, or its lifetime.
func TestHogPoolMostNotSum(t *testing.T) {
	parallel(t)
	p := &hogPool{life: time.Minute}
	alive := func() int {
		p.mu.Lock()
		defer p.mu.Unlock()
		n := 0
		for _, c := range p.cmds {
			if c.Process.Signal(syscall.Signal(0)) == nil {
				n++
			}
		}
		return n
	}
	stopA := p.request(t, 2, time.Minute)
	stopB := p.request(t, 1, time.Minute)
	if n := alive(); n != 2 {
		t.Fatalf("requests for 2 and 1: %d loops, want 2", n)
	}
	var groups []int
	p.mu.Lock()
	for _, c := range p.cmds {
		groups = append(groups, c.Process.Pid)
	}
	p.mu.Unlock()
	stopA()
	if n := alive(); n != 1 {
		t.Fatalf("the request for 2 ended: %d loops, want 1", n)
	}
	stopB()
	if n := alive(); n != 0 {
		t.Fatalf("every request ended: %d loops, want none", n)
	}
	for _, g := range groups { // timeout(1) and its shell, reaped by init
		for end := time.Now().Add(3 * time.Second); syscall.Kill(-g, 0) == nil; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("process group %d still runs after every request ended", g)
			}
		}
	}
	p.request(t, 1, 300*time.Millisecond)
	deadline := time.Now().Add(5 * time.Second)
	for alive() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("a request's loops outlived its lifetime")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
