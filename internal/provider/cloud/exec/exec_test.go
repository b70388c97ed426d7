package exec_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/testbin"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/provider"
	"github.com/shoal-lb/shoal/internal/provider/cloud"
	"github.com/shoal-lb/shoal/internal/provider/cloud/exec"
	"github.com/shoal-lb/shoal/internal/testport"
)

func TestMain(m *testing.M) { testbin.Main(m) }

// fakeCloud is testdata/fakecloud.sh's state directory: a cloud whose
// servers are demo-backend processes on loopback addresses.
type fakeCloud struct {
	t    *testing.T
	dir  string
	port int
	// stateDir is the newest provider's: a restarted shoal's has it.
	stateDir string
}

func newFakeCloud(t *testing.T) *fakeCloud {
	t.Helper()
	for _, tool := range []string{"jq", "flock", "setsid"} {
		if _, err := osexec.LookPath(tool); err != nil {
			t.Fatalf("testdata/fakecloud.sh needs %s (make test-deps installs it): %v", tool, err)
		}
	}
	c := &fakeCloud{t: t, dir: t.TempDir(), port: freePort(t)}
	if err := os.WriteFile(filepath.Join(c.dir, "backend"), []byte(testbin.DemoBackend(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.killAll)
	return c
}

func freePort(t *testing.T) int {
	return testport.Free(t)
}

func (c *fakeCloud) script() string {
	s, err := filepath.Abs("testdata/fakecloud.sh")
	if err != nil {
		c.t.Fatal(err)
	}
	return s
}

// config is an exec provider entry driving this cloud.
func (c *fakeCloud) config() exec.Config {
	s := c.script()
	return exec.Config{
		Start:    []string{"sh", s, c.dir, "start", "{{.Name}}", "{{.Port}}"},
		Stop:     []string{"sh", s, c.dir, "stop", "{{.ID}}"},
		List:     []string{"sh", s, c.dir, "list", "{{.Owner}}"},
		PowerOff: []string{"sh", s, c.dir, "power_off", "{{.ID}}"},
		PowerOn:  []string{"sh", s, c.dir, "power_on", "{{.ID}}"},
		// A bound on the shell-and-jq stand-in, not what a test proves
		// (those that time a command out set their own): on a loaded
		// machine a create took over 5 s.
		Timeout: 15 * time.Second,
	}
}

// misbehave makes command cmd fail in mode ("" restores it).
func (c *fakeCloud) misbehave(cmd, mode string) {
	p := filepath.Join(c.dir, "fail-"+cmd)
	if mode == "" {
		os.Remove(p)
		return
	}
	if err := os.WriteFile(p, []byte(mode), 0o644); err != nil {
		c.t.Fatal(err)
	}
}

func (c *fakeCloud) setBoot(seconds int) {
	if err := os.WriteFile(filepath.Join(c.dir, "boot"), []byte(strconv.Itoa(seconds)), 0o644); err != nil {
		c.t.Fatal(err)
	}
}

type fakeServer struct {
	ID      string            `json:"id"`
	Name    string            `json:"name"`
	Address string            `json:"address"`
	PID     int               `json:"pid"`
	Tags    map[string]string `json:"tags"`
	// Stopped: powered off (power_off), not deleted.
	Stopped bool `json:"stopped"`
}

// servers reads the cloud's servers from its files, not through the CLI.
func (c *fakeCloud) servers() map[string]fakeServer {
	c.t.Helper()
	files, _ := filepath.Glob(filepath.Join(c.dir, "servers", "*.json"))
	out := map[string]fakeServer{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // deleted meanwhile
		}
		var s fakeServer
		if err := json.Unmarshal(b, &s); err != nil {
			c.t.Fatalf("%s: %v", f, err)
		}
		out[s.ID] = s
	}
	return out
}

// deleteOutside deletes a server as an operator at the cloud's console would.
func (c *fakeCloud) deleteOutside(id string) {
	if out, err := osexec.Command("sh", c.script(), c.dir, "delete", id).CombinedOutput(); err != nil {
		c.t.Fatalf("delete %s: %v: %s", id, err, out)
	}
}

func (c *fakeCloud) killAll() {
	for _, s := range c.servers() {
		if s.PID > 0 {
			syscall.Kill(s.PID, syscall.SIGKILL)
		}
	}
}

// calls counts the commands the cloud ran, by name.
func (c *fakeCloud) calls() map[string]int {
	b, _ := os.ReadFile(filepath.Join(c.dir, "calls"))
	out := map[string]int{}
	for l := range strings.Lines(string(b)) {
		out[strings.Fields(l)[0]]++
	}
	return out
}

type env struct {
	cloud    *fakeCloud
	prov     *cloud.Provider
	owner    string
	cfg      config.CloudProvider
	stateDir string
	// stop ends the provider's Run as a shoal killed would: nothing is
	// deleted.
	stop func()
}

// newProvider returns a running cloud provider over c's exec driver.
func newProvider(t *testing.T, c *fakeCloud, owner string, tweak func(*config.CloudProvider)) *env {
	t.Helper()
	return newProviderWith(t, c, owner, tweak, cloud.Options{})
}

// newProviderWith is newProvider with opts (Guard, ReapEvery); the owner,
// driver and state directory are newProvider's.
func newProviderWith(t *testing.T, c *fakeCloud, owner string, tweak func(*config.CloudProvider), opts cloud.Options) *env {
	t.Helper()
	cfg := config.CloudProvider{Port: c.port, Interval: 200 * time.Millisecond, BootTimeout: 20 * time.Second,
		CreateTimeout: 20 * time.Second, DeleteTimeout: 10 * time.Second}
	if tweak != nil {
		tweak(&cfg)
	}
	ed, err := exec.New(c.config(), cfg.Port)
	if err != nil {
		t.Fatal(err)
	}
	d := ed.Cloud()
	stateDir := t.TempDir()
	if cfg.Emulator != nil && c.stateDir != "" {
		stateDir = c.stateDir // a restarted shoal: the same stand-ins
	}
	opts.Owner, opts.Driver, opts.StateDir = owner, exec.Type, stateDir
	if opts.Log == nil && os.Getenv("POOLDEBUG") != "" {
		opts.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	p, err := cloud.New("fake", d, cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	c.stateDir = stateDir
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { p.Run(ctx) })
	stop := func() { cancel(); wg.Wait() }
	t.Cleanup(stop)
	return &env{cloud: c, prov: p, owner: owner, cfg: cfg, stateDir: stateDir, stop: stop}
}

func spec(name string, index int) provider.Spec {
	tmpl, _ := config.NewTemplate([]string{"unused-by-cloud-servers"}, nil)
	return provider.Spec{Group: "web", Name: name, Index: index, Template: tmpl}
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// exits reports whether pid has exited (or is a zombie nobody reaped)
// within d.
func exits(pid int, d time.Duration) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return true
		}
		if i := strings.LastIndexByte(string(b), ')'); i > 0 && strings.HasPrefix(string(b[i:]), ") Z") {
			return true
		}
	}
	return false
}

func waitDone(t *testing.T, in provider.Instance, within time.Duration) string {
	t.Helper()
	select {
	case <-in.Done():
		return in.ExitReason()
	case <-time.After(within):
		t.Fatalf("instance %s still not done after %s", in.Record().Name, within)
		return ""
	}
}

func notDone(t *testing.T, in provider.Instance, during time.Duration) {
	t.Helper()
	select {
	case <-in.Done():
		t.Fatalf("instance %s done: %s", in.Record().Name, in.ExitReason())
	case <-time.After(during):
	}
}

// TestStartServeStop: 10 instances start as servers of the cloud (concurrent
// starts, one listing per interval for all of them), serve on their
// loopback address and the provider's port, and stop by deletion.
func TestStartServeStop(t *testing.T) {
	c := newFakeCloud(t)
	c.setBoot(2) // "provisioning" for 1-2 s (whole seconds), as a real cloud's pending
	e := newProvider(t, c, "owner-a", nil)
	ctx := ctxFor(t, time.Minute)

	const n = 10
	ins := make([]provider.Instance, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range ins {
		wg.Go(func() { ins[i], errs[i] = e.prov.Start(ctx, spec(fmt.Sprintf("web-%03d", i+1), i+1)) })
	}
	wg.Wait()
	boot := time.Since(start)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
	}
	if boot < time.Second {
		t.Errorf("started in %s, before the servers left provisioning", boot)
	}
	servers := c.servers()
	if len(servers) != n {
		t.Fatalf("cloud has %d servers, want %d: %v", len(servers), n, servers)
	}
	for _, in := range ins {
		rec := in.Record()
		s, ok := servers[rec.ID]
		if !ok {
			t.Fatalf("record %+v names no server", rec)
		}
		if want := net.JoinHostPort(s.Address, strconv.Itoa(c.port)); rec.Addr != want || rec.Host != s.Name {
			t.Errorf("record addr %s host %s, want %s %s", rec.Addr, rec.Host, want, s.Name)
		}
		if s.Tags[cloud.TagOwner] != "owner-a" || s.Tags[cloud.TagInstance] != rec.Name || s.Tags[cloud.TagGroup] != "web" {
			t.Errorf("server %s tags %v", s.ID, s.Tags)
		}
		if got := testbin.Get(t, rec.Addr); got != rec.Name {
			t.Errorf("GET %s answered as %q, want %s", rec.Addr, got, rec.Name)
		}
		var d struct{ ID, Name, Driver string }
		if err := json.Unmarshal(rec.Data, &d); err != nil || d.ID != rec.ID || d.Driver != "exec" {
			t.Errorf("record data %s (%v)", rec.Data, err)
		}
	}
	calls := e.prov.Calls()
	if calls.Create != n {
		t.Errorf("creates = %d, want %d", calls.Create, n)
	}
	// Booting takes 1-2 s at the fast interval (1 s, or 200 ms here): a
	// listing per interval, shared by all the servers, never one each.
	if maxLists := int64(boot/(200*time.Millisecond)) + 3; calls.List > maxLists {
		t.Errorf("%d listings in %s for %d servers, want at most %d (one per interval)", calls.List, boot, n, maxLists)
	}
	t.Logf("%d servers running in %s (the fake cloud boots them in 1-2 s) with %+v API calls", n, boot.Round(time.Millisecond), calls)

	victim := ins[1]
	pid := servers[victim.Record().ID].PID
	if err := victim.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if r := waitDone(t, victim, time.Second); r != "stopped" {
		t.Errorf("exit reason %q, want stopped", r)
	}
	if _, ok := c.servers()[victim.Record().ID]; ok {
		t.Error("server still in the cloud after Stop")
	}
	if !exits(pid, 5*time.Second) {
		t.Errorf("server process %d still runs after Stop", pid)
	}
	for _, in := range slices.Concat(ins[:1], ins[2:]) {
		notDone(t, in, 0)
	}
}

// TestDeletedOutside: a server deleted at the cloud's console ends its
// instance, with the reason.
func TestDeletedOutside(t *testing.T) {
	c := newFakeCloud(t)
	e := newProvider(t, c, "owner-b", nil)
	in, err := e.prov.Start(ctxFor(t, time.Minute), spec("web-001", 1))
	if err != nil {
		t.Fatal(err)
	}
	c.deleteOutside(in.Record().ID)
	r := waitDone(t, in, 5*time.Second)
	if want := "server " + in.Record().Host + " deleted outside shoal (state absent from the listing)"; r != want {
		t.Errorf("reason %q, want %q", r, want)
	}
}

// TestListFailureNeverGone: while listing fails, in every way a CLI can
// fail, no instance is taken for gone; adoption then returns the instance
// unverified (not ErrGone), verified by the first listing that works.
func TestListFailureNeverGone(t *testing.T) {
	t.Parallel() // waits out listing failures; its own fake cloud
	c := newFakeCloud(t)
	e := newProvider(t, c, "owner-c", func(cfg *config.CloudProvider) { cfg.Interval = 100 * time.Millisecond })
	ctx := ctxFor(t, 2*time.Minute)
	in, err := e.prov.Start(ctx, spec("web-001", 1))
	if err != nil {
		t.Fatal(err)
	}
	gone, err := e.prov.Start(ctx, spec("web-002", 2))
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"fail", "garbage", "huge"} {
		c.misbehave("list", mode)
		c.deleteOutside(gone.Record().ID) // its absence must not be news while listing fails
		notDone(t, in, 700*time.Millisecond)
		notDone(t, gone, 0)
		// Put it back as it was for the next mode: same ID, same process.
		c.misbehave("list", "")
		time.Sleep(50 * time.Millisecond)
		c.misbehave("list", mode)
	}
	// A second shoal (restarted) adopts while listing fails: unverified.
	d, err := exec.New(c.config(), c.port)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := cloud.New("fake", d, e.cfg, cloud.Options{Owner: "owner-c", Driver: "exec", StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	adopted, err := p2.Adopt(ctx, in.Record(), config.Template{})
	if err != nil {
		t.Fatalf("adopt while listing fails: %v (want the instance, unverified)", err)
	}
	if errors.Is(err, provider.ErrGone) {
		t.Fatal("ErrGone while listing fails")
	}
	adoptedGone, err := p2.Adopt(ctx, gone.Record(), config.Template{})
	if err != nil {
		t.Fatalf("adopt while listing fails: %v", err)
	}
	c.misbehave("list", "")
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { p2.Run(rctx) })
	defer func() { cancel(); wg.Wait() }()
	if r := waitDone(t, adoptedGone, 5*time.Second); !strings.Contains(r, "deleted while shoal was down") {
		t.Errorf("unverified instance whose server is gone: reason %q", r)
	}
	if r := waitDone(t, gone, 5*time.Second); !strings.Contains(r, "deleted outside shoal") {
		t.Errorf("reason %q", r)
	}
	notDone(t, adopted, 500*time.Millisecond)
	notDone(t, in, 0)
}

// TestAdoptAndStrays: after a restart, a recorded server is adopted, one
// deleted meanwhile is ErrGone, and one created but never recorded (shoal
// killed mid-start) is deleted as a stray.
func TestAdoptAndStrays(t *testing.T) {
	c := newFakeCloud(t)
	ctx := ctxFor(t, time.Minute)
	first := newProvider(t, c, "owner-d", nil)
	var recs []provider.Record
	for i := range 3 {
		in, err := first.prov.Start(ctx, spec(fmt.Sprintf("web-%03d", i+1), i+1))
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, in.Record())
	}
	// Another shoal's server (other owner) is never touched.
	other := newProvider(t, c, "owner-other", nil)
	foreign, err := other.prov.Start(ctx, spec("web-001", 1))
	if err != nil {
		t.Fatal(err)
	}
	c.deleteOutside(recs[1].ID)

	second := newProvider(t, c, "owner-d", nil)
	in, err := second.prov.Adopt(ctx, recs[0], config.Template{})
	if err != nil {
		t.Fatal(err)
	}
	if in.Record().ID != recs[0].ID || in.Record().Addr != recs[0].Addr {
		t.Errorf("adopted %+v, want %+v", in.Record(), recs[0])
	}
	if _, err := second.prov.Adopt(ctx, recs[1], config.Template{}); !errors.Is(err, provider.ErrGone) {
		t.Errorf("adopting a deleted server: %v, want ErrGone", err)
	}
	// recs[2] was never recorded (shoal died before): a stray.
	stopped, err := second.prov.StopStrays(ctx, []provider.Record{recs[0]})
	if err != nil {
		t.Fatal(err)
	}
	if len(stopped) != 1 || stopped[0].ID != recs[2].ID || stopped[0].Name != recs[2].Name || stopped[0].Group != "web" {
		t.Errorf("strays %+v, want %s", stopped, recs[2].ID)
	}
	servers := c.servers()
	if _, ok := servers[recs[2].ID]; ok {
		t.Error("stray server still in the cloud")
	}
	if _, ok := servers[recs[0].ID]; !ok {
		t.Error("kept server deleted")
	}
	if _, ok := servers[foreign.Record().ID]; !ok {
		t.Error("another owner's server deleted")
	}
	if got := testbin.Get(t, in.Record().Addr); got != "web-001" {
		t.Errorf("adopted instance answers as %q", got)
	}
}

// TestStraysSweptWhenListingWorks: a restarted shoal that cannot list
// sweeps nothing then, and deletes the strays at its first listing that
// works while its Guard passes (an HA node that leads): refused, it
// deletes nothing.
func TestStraysSweptWhenListingWorks(t *testing.T) {
	t.Parallel() // waits for the sweep; its own fake cloud
	c := newFakeCloud(t)
	ctx := ctxFor(t, time.Minute)
	first := newProvider(t, c, "owner-k", nil)
	var recs []provider.Record
	for i := range 2 {
		in, err := first.prov.Start(ctx, spec(fmt.Sprintf("web-%03d", i+1), i+1))
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, in.Record())
	}
	c.misbehave("list", "fail")
	var leads atomic.Bool
	var asked atomic.Int32
	guard := func(context.Context) error {
		asked.Add(1)
		if !leads.Load() {
			return errors.New("not the leader: refused by the fence")
		}
		return nil
	}
	second := newProviderWith(t, c, "owner-k", nil, cloud.Options{Guard: guard})
	if _, err := second.prov.Adopt(ctx, recs[0], config.Template{}); err != nil {
		t.Fatal(err)
	}
	stopped, err := second.prov.StopStrays(ctx, []provider.Record{recs[0]})
	if err == nil || len(stopped) != 0 || !strings.Contains(err.Error(), "quota exceeded") {
		t.Fatalf("StopStrays while listing fails = %v, %v", stopped, err)
	}
	time.Sleep(500 * time.Millisecond)
	if n := len(c.servers()); n != 2 {
		t.Fatalf("%d servers while listing fails, want both", n)
	}
	c.misbehave("list", "")
	// Asked after each listing that works while the sweep is pending.
	for deadline := time.Now().Add(30 * time.Second); asked.Load() < 2; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the guard was asked %d times within 30s, want 2", asked.Load())
		}
	}
	if n := len(c.servers()); n != 2 {
		t.Fatalf("%d servers after listings while the guard refuses, want both", n)
	}
	leads.Store(true)
	deadline := time.Now().Add(10 * time.Second)
	for {
		servers := c.servers()
		_, kept := servers[recs[0].ID]
		if !kept {
			t.Fatal("the kept server was deleted")
		}
		if len(servers) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stray never deleted: %v", servers)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestBadOutput: every way start can misbehave fails that instance with a
// clear reason quoting the command's stderr, and leaves no server behind.
func TestBadOutput(t *testing.T) {
	for _, tc := range []struct {
		mode string
		want []string
	}{
		{"fail", []string{"exit status 3", "stderr: fakecloud: start refused: quota exceeded for project test"}},
		{"garbage", []string{"not JSON", `"<html>502 Bad Gateway</html>\n"`, "stderr: fakecloud: the API's gateway answered 502"}},
		{"noaddr", []string{`no address in its answer`, "stderr: fakecloud: server has no public IP yet"}},
		{"huge", []string{"printed more than 1048576 bytes (1 MiB); killed", "stderr: fakecloud: dumping"}},
		{"hang", []string{"timed out after 1s; killed", "stderr: fakecloud: waiting for the API"}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			c := newFakeCloud(t)
			e := newProvider(t, c, "owner-e", nil)
			cfg := c.config()
			cfg.Timeout = time.Second
			d, err := exec.New(cfg, c.port)
			if err != nil {
				t.Fatal(err)
			}
			p, err := cloud.New("fake", d, e.cfg, cloud.Options{Owner: "owner-e", Driver: "exec"})
			if err != nil {
				t.Fatal(err)
			}
			rctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			wg.Go(func() { p.Run(rctx) })
			defer func() { cancel(); wg.Wait() }()
			c.misbehave("start", tc.mode)
			begin := time.Now()
			_, err = p.Start(ctxFor(t, time.Minute), spec("web-001", 1))
			if err == nil {
				t.Fatal("start succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if took := time.Since(begin); took > 10*time.Second {
				t.Errorf("failing start took %s", took)
			}
			if n := len(c.servers()); n != 0 {
				t.Errorf("%d servers left behind", n)
			}
			if calls := p.Calls(); calls.Create != 1 {
				t.Errorf("%d creates, want 1 (not retryable)", calls.Create)
			}
		})
	}
}

// TestRetryableCreate: a CLI that says "later" (exit 75) is retried with
// back-off (1 s, 2 s) and the instance then starts.
func TestRetryableCreate(t *testing.T) {
	t.Parallel() // waits out create retries; its own fake cloud
	c := newFakeCloud(t)
	e := newProvider(t, c, "owner-f", nil)
	c.misbehave("start", "tempfail")
	begin := time.Now()
	in, err := e.prov.Start(ctxFor(t, time.Minute), spec("web-001", 1))
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(begin); took < 3*time.Second {
		t.Errorf("started after %s; the back-off is 1 s then 2 s", took)
	}
	if n := e.prov.Calls().Create; n != 3 {
		t.Errorf("%d creates, want 3", n)
	}
	testbin.Get(t, in.Record().Addr)
}

// TestLeftoverOfRetriedCreate: a create that made a server but reported
// a failure is retried; the listing then shows two servers of the
// instance's name, and the one shoal did not get is deleted.
func TestLeftoverOfRetriedCreate(t *testing.T) {
	t.Parallel() // waits for the leftover's delete; its own fake cloud
	c := newFakeCloud(t)
	e := newProvider(t, c, "owner-j", nil)
	c.misbehave("start", "dup")
	in, err := e.prov.Start(ctxFor(t, time.Minute), spec("web-001", 1))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		servers := c.servers()
		if len(servers) == 1 {
			if _, ok := servers[in.Record().ID]; !ok {
				t.Fatalf("the instance's own server was deleted: %v", servers)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("leftover never deleted: %v", servers)
		}
		time.Sleep(100 * time.Millisecond)
	}
	notDone(t, in, 300*time.Millisecond)
	if calls := e.prov.Calls(); calls.Create != 2 || calls.Delete != 1 {
		t.Errorf("calls %+v, want 2 creates and 1 delete", calls)
	}
}

// TestBootTimeout: a server that never leaves provisioning is deleted
// after boot_timeout: no leaked spend.
func TestBootTimeout(t *testing.T) {
	c := newFakeCloud(t)
	c.setBoot(3600)
	e := newProvider(t, c, "owner-g", func(cfg *config.CloudProvider) { cfg.BootTimeout = time.Second })
	_, err := e.prov.Start(ctxFor(t, time.Minute), spec("web-001", 1))
	if err == nil || !strings.Contains(err.Error(), "not running within boot_timeout 1s (state provisioning") {
		t.Fatalf("start: %v", err)
	}
	if n := len(c.servers()); n != 0 {
		t.Errorf("%d servers left behind", n)
	}
	if n := e.prov.Calls().Delete; n != 1 {
		t.Errorf("%d deletes, want 1", n)
	}
}

// TestStopRetriesWhileDeleteFails: a stop the cloud refuses fails with
// the reason; the poller keeps deleting (every 2 s here, 15 s in
// production) until the server is gone.
func TestStopRetriesWhileDeleteFails(t *testing.T) {
	t.Parallel() // waits out the poller's time between deletes; its own fake cloud
	c := newFakeCloud(t)
	e := newProviderWith(t, c, "owner-h", nil, cloud.Options{ReapEvery: 2 * time.Second})
	in, err := e.prov.Start(ctxFor(t, time.Minute), spec("web-001", 1))
	if err != nil {
		t.Fatal(err)
	}
	c.misbehave("stop", "fail")
	err = in.Stop(ctxFor(t, 2*time.Second))
	if err == nil || !strings.Contains(err.Error(), "quota exceeded") {
		t.Fatalf("stop: %v", err)
	}
	if len(c.servers()) != 1 {
		t.Fatal("server gone although every delete failed")
	}
	c.misbehave("stop", "")
	deadline := time.Now().Add(20 * time.Second)
	for len(c.servers()) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("server never deleted after the cloud recovered")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r := waitDone(t, in, 5*time.Second); r != "stopped" {
		t.Errorf("reason %q", r)
	}
}

// TestEmulatorStandIns: against an emulator each server gets a local
// stand-in, which is what the instance's address reaches; it stops with
// the server, and a stand-in's exit ends the instance.
func TestEmulatorStandIns(t *testing.T) {
	c := newFakeCloud(t)
	e := newProvider(t, c, "owner-i", func(cfg *config.CloudProvider) {
		cfg.Emulator = &config.Emulator{StandIn: []string{testbin.DemoBackend(t), "--listen", "127.0.0.1:{{.Port}}", "--name", "stand-in-{{.Name}}"}}
	})
	ctx := ctxFor(t, time.Minute)
	in, err := e.prov.Start(ctx, spec("web-001", 1))
	if err != nil {
		t.Fatal(err)
	}
	rec := in.Record()
	if !strings.HasPrefix(rec.Addr, "127.0.0.1:") {
		t.Fatalf("addr %s, want the stand-in's on 127.0.0.1", rec.Addr)
	}
	if got := testbin.Get(t, rec.Addr); got != "stand-in-web-001" {
		t.Errorf("answered as %q", got)
	}
	if in.PID() <= 0 {
		t.Error("no stand-in pid")
	}
	// A restarted shoal adopts the server through its recorded stand-in.
	second := newProvider(t, c, "owner-i", func(cfg *config.CloudProvider) { cfg.Emulator = e.cfg.Emulator })
	adopted, err := second.prov.Adopt(ctx, rec, config.Template{})
	if err != nil {
		t.Fatal(err)
	}
	if adopted.Record().Addr != rec.Addr || adopted.PID() != in.PID() {
		t.Errorf("adopted %+v pid %d, want %+v pid %d", adopted.Record(), adopted.PID(), rec, in.PID())
	}
	pid := in.PID()
	if err := adopted.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if !exits(pid, 5*time.Second) {
		t.Errorf("stand-in %d still runs after Stop", pid)
	}
	if len(c.servers()) != 0 {
		t.Error("server still in the cloud")
	}

	in2, err := e.prov.Start(ctx, spec("web-002", 2))
	if err != nil {
		t.Fatal(err)
	}
	syscall.Kill(in2.PID(), syscall.SIGKILL)
	if r := waitDone(t, in2, 5*time.Second); !strings.Contains(r, "emulator stand-in exited") {
		t.Errorf("reason %q", r)
	}
	if err := in2.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if len(c.servers()) != 0 {
		t.Error("server of a dead stand-in still in the cloud after Stop")
	}
}

// TestRunEndsLeavingInstances: the poller ends with its context at once,
// however many instances it watches (shoal stopping with shutdown: keep);
// their servers and stand-ins keep running for the next run to adopt.
func TestRunEndsLeavingInstances(t *testing.T) {
	c := newFakeCloud(t)
	cfg := config.CloudProvider{Port: c.port, Interval: 200 * time.Millisecond, BootTimeout: 20 * time.Second,
		CreateTimeout: 20 * time.Second, DeleteTimeout: 10 * time.Second,
		Emulator: &config.Emulator{StandIn: []string{testbin.DemoBackend(t), "--listen", "127.0.0.1:{{.Port}}"}}}
	d, err := exec.New(c.config(), cfg.Port)
	if err != nil {
		t.Fatal(err)
	}
	p, err := cloud.New("fake", d, cfg, cloud.Options{Owner: "owner-l", Driver: "exec", StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); p.Run(ctx) }()
	in, err := p.Start(ctxFor(t, time.Minute), spec("web-001", 1))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(in.PID(), syscall.SIGKILL) })
	cancel()
	select {
	case <-ran:
	case <-time.After(2 * time.Second):
		t.Fatal("Run still running 2s after its context ended")
	}
	notDone(t, in, 0)
	if exits(in.PID(), 200*time.Millisecond) {
		t.Error("the stand-in stopped with the poller")
	}
	if len(c.servers()) != 1 {
		t.Error("the server is gone")
	}
}
