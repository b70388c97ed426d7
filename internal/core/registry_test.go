package core

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/group"
	"github.com/shoal-lb/shoal/internal/jobrun"
	"github.com/shoal-lb/shoal/internal/metrics"
	"github.com/shoal-lb/shoal/internal/store"
)

// registryEnv is a registry over groups of no instances (min_size 0: their
// reconcilers start nothing, so no provider or HAProxy is needed), a job
// manager and a metrics collector reading it, and a policy func that
// records which policies run.
type registryEnv struct {
	st  *store.Store
	reg *registry
	jm  *jobrun.Manager
	col *metrics.Collector
	pol *policies
	// stuck is set when an apply never returned: it holds the loops, and
	// stopping them at cleanup would hang too (no process runs to leak).
	stuck bool
}

// policies records the policy runners the registry starts: each one's group
// and max_size when it started, and which are running.
type policies struct {
	// lookup, when set, is called by a runner as it stops, as a runner
	// stopped in the middle of an evaluation looks its group up.
	lookup func(name string)

	mu      sync.Mutex
	started []string // "NAME:MAX_SIZE"
	running map[string]int
}

func (p *policies) policy(g *group.Group) func(context.Context) {
	c := g.Config()
	if c.Autoscale == nil {
		return nil
	}
	return func(ctx context.Context) {
		p.mu.Lock()
		p.started = append(p.started, c.Name+":"+strconv.Itoa(c.MaxSize))
		p.running[c.Name]++
		p.mu.Unlock()
		<-ctx.Done()
		if p.lookup != nil {
			p.lookup(c.Name)
		}
		p.mu.Lock()
		p.running[c.Name]--
		p.mu.Unlock()
	}
}

// waitRunning waits until the policies of names, and only they, are running.
func (p *policies) waitRunning(t *testing.T, names ...string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		_, running := p.state()
		if slices.Equal(running, names) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("policies running: %v, want %v", running, names)
		}
	}
}

func (p *policies) state() (started []string, running []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for name, n := range p.running {
		if n > 1 {
			running = append(running, name+" twice")
		} else if n == 1 {
			running = append(running, name)
		}
	}
	slices.Sort(running)
	return slices.Clone(p.started), running
}

func groupConfig(name string, maxSize int, policy bool) config.Group {
	c := config.Group{Name: name, MinSize: 0, MaxSize: maxSize, DrainTimeout: time.Second}
	if policy {
		c.Autoscale = &config.Autoscale{}
	}
	return c
}

func newRegistryEnv(t *testing.T, cfgs ...config.Group) *registryEnv {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "shoal.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e := &registryEnv{st: st, pol: &policies{running: map[string]int{}}}
	var gs []*group.Group
	for _, c := range cfgs {
		gs = append(gs, e.group(t, c))
	}
	e.reg = newRegistry(gs)
	e.jm, err = jobrun.NewManager(context.Background(), e.reg, st, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	e.col, err = metrics.Open(metrics.Options{Metrics: config.DefaultMetrics, Source: e.reg, DB: filepath.Join(dir, metrics.DBName)})
	if err != nil {
		t.Fatal(err)
	}
	e.reg.start(e.pol.policy)
	t.Cleanup(func() {
		if e.stuck {
			return
		}
		e.reg.stopPolicies()
		e.jm.Close()
		e.col.Close()
		e.reg.stopReconcilers(false)
	})
	return e
}

func (e *registryEnv) group(t *testing.T, c config.Group) *group.Group {
	t.Helper()
	g, err := group.New(context.Background(), c, nil, nil, e.st, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// sees reports what the registry's readers see of a group: the registry
// itself, the job manager and the metrics collector.
func (e *registryEnv) sees(t *testing.T, name string) (registry, jobs_, metrics_ bool) {
	t.Helper()
	_, registry = e.reg.Group(name)
	_, err := e.jm.Submit(context.Background(), jobrun.Request{Group: name, Kind: jobrun.Keep, Source: "test"})
	jobs_ = !errors.Is(err, jobrun.ErrUnknownGroup)
	_, err = e.col.Document(context.Background(), name, time.Minute, "")
	metrics_ = !errors.Is(err, metrics.ErrUnknownGroup)
	return registry, jobs_, metrics_
}

// TestRegistryApply: one apply adds, removes and changes groups for every
// reader at once; a changed group's policy restarts with its new config, a
// removed group's stops while its reconciler runs on until the caller has
// retired it, and an added group's starts.
func TestRegistryApply(t *testing.T) {
	e := newRegistryEnv(t, groupConfig("web", 3, true), groupConfig("old", 2, true), groupConfig("batch", 2, false))
	if got := e.reg.Names(); !slices.Equal(got, []string{"batch", "old", "web"}) {
		t.Fatalf("names %v", got)
	}
	e.pol.waitRunning(t, "old", "web")
	old, _ := e.reg.Group("old")
	web, _ := e.reg.Group("web")
	batch, _ := e.reg.Group("batch")
	added := e.group(t, groupConfig("new", 4, true))

	removed := e.reg.apply(context.Background(), change{
		changed: []groupChange{{g: web, cfg: groupConfig("web", 5, true)}},
		removed: []*group.Group{old},
		added:   []*group.Group{added},
	})

	if len(removed) != 1 || removed[0].g != old {
		t.Fatalf("removed %v, want old's member", removed)
	}
	select {
	case <-removed[0].run.done:
		t.Fatal("the removed group's reconciler stopped before it was retired")
	default:
	}
	removed[0].run.stop()
	if got := e.reg.Names(); !slices.Equal(got, []string{"batch", "new", "web"}) {
		t.Fatalf("names after apply %v", got)
	}
	if all := e.reg.All(); len(all) != 3 || all[0] != batch || all[1] != added || all[2] != web {
		t.Fatalf("All after apply: %v", all)
	}
	for name, want := range map[string]bool{"web": true, "batch": true, "new": true, "old": false} {
		r, j, m := e.sees(t, name)
		if r != want || j != want || m != want {
			t.Errorf("group %s seen by registry %t, jobs %t, metrics %t; want %t", name, r, j, m, want)
		}
	}
	if c := web.Config(); c.MaxSize != 5 {
		t.Errorf("web's max_size %d after apply, want 5", c.MaxSize)
	}
	e.pol.waitRunning(t, "new", "web")
	// old and web at start, then web with its new config and the added group.
	started, _ := e.pol.state()
	slices.Sort(started[:2])
	slices.Sort(started[2:])
	if want := []string{"old:2", "web:3", "new:4", "web:5"}; !slices.Equal(started, want) {
		t.Errorf("policies started %v, want %v", started, want)
	}
}

// TestRegistryReadersDuringApply: while a reload applies its change, readers
// see the old set or the new one, never a mix, and a policy runner being
// stopped can still look groups up (apply does not hold the readers' lock
// while it waits for runners).
func TestRegistryReadersDuringApply(t *testing.T) {
	e := newRegistryEnv(t, groupConfig("a", 2, true), groupConfig("b", 2, true))
	e.pol.waitRunning(t, "a", "b")
	stopping := make(chan struct{}, 4)
	e.pol.lookup = func(name string) {
		e.reg.Group(name)
		e.reg.Names()
		stopping <- struct{}{}
	}
	a, _ := e.reg.Group("a")
	b, _ := e.reg.Group("b")
	c := e.group(t, groupConfig("c", 2, true))

	done, reading := make(chan struct{}), make(chan struct{})
	var seen [][]string
	var readers sync.WaitGroup
	readers.Go(func() {
		for {
			names := e.reg.Names()
			if len(seen) == 0 || !slices.Equal(seen[len(seen)-1], names) {
				seen = append(seen, names)
				if len(seen) == 1 {
					close(reading)
				}
			}
			select {
			case <-done:
				return
			default:
			}
		}
	})
	<-reading
	applied := make(chan []*member)
	go func() {
		applied <- e.reg.apply(context.Background(), change{
			changed: []groupChange{{g: a, cfg: groupConfig("a", 3, true)}},
			removed: []*group.Group{b},
			added:   []*group.Group{c},
		})
	}()
	var removed []*member
	select {
	case removed = <-applied:
	case <-time.After(10 * time.Second):
		e.stuck = true
		close(done)
		t.Fatal("apply did not return: a stopping policy runner's lookup is blocked")
	}
	for _, m := range removed {
		m.run.stop()
	}
	close(done)
	readers.Wait()
	if n := len(stopping); n != 2 {
		t.Errorf("%d stopping runners looked groups up, want 2 (a's and b's)", n)
	}
	// The reader's sets, each once in the order seen: the old one, then
	// the new one, and nothing in between or after.
	if !slices.EqualFunc(seen, [][]string{{"a", "b"}, {"a", "c"}}[:len(seen)], slices.Equal[[]string]) {
		t.Errorf("a reader saw %v during apply; want [a b] before, [a c] after", seen)
	}
	if got := e.reg.Names(); !slices.Equal(got, []string{"a", "c"}) {
		t.Errorf("names after apply %v, want [a c]", got)
	}
}

// TestRegistryStops: stopPolicies stops every runner and lets no later
// apply start one; stopReconcilers ends every reconciler.
func TestRegistryStops(t *testing.T) {
	e := newRegistryEnv(t, groupConfig("a", 2, true), groupConfig("b", 2, true))
	e.pol.waitRunning(t, "a", "b")
	e.reg.stopPolicies()
	if _, running := e.pol.state(); len(running) != 0 {
		t.Fatalf("policies still running: %v", running)
	}
	a, _ := e.reg.Group("a")
	e.reg.apply(context.Background(), change{changed: []groupChange{{g: a, cfg: groupConfig("a", 3, true)}}})
	if started, running := e.pol.state(); len(running) != 0 || len(started) != 2 {
		t.Fatalf("after stopPolicies, an apply started policies: started %v, running %v", started, running)
	}
	runs := []*loop{}
	for _, m := range e.reg.snapshot() {
		runs = append(runs, m.run)
	}
	e.reg.stopReconcilers(true)
	for i, l := range runs {
		select {
		case <-l.done:
		default:
			t.Errorf("reconciler %d still running", i)
		}
	}
	for _, m := range e.reg.snapshot() {
		if m.run != nil {
			t.Errorf("group %s keeps a stopped reconciler", m.g.Name())
		}
	}
}
