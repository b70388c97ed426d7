package cloud

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/provider"
)

// scriptedDriver is a Driver whose answers a test sets: the provider's
// own logic (retries, boot waits) is what is under test; the drivers are
// tested against their clouds (exec's scripts, moto, the sacloud fake).
type scriptedDriver struct {
	mu      sync.Mutex
	create  func(n int) (Server, error) // n counts the calls from 1
	creates int
	servers map[string]Server
	deleted []string
	// refuse, when set, is every Delete's answer (an API outage);
	// listErr every List's.
	refuse  error
	listErr error
}

func (d *scriptedDriver) Create(_ context.Context, req CreateRequest) (Server, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.creates++
	s, err := d.create(d.creates)
	if err == nil {
		s.Tags = req.Tags
		d.servers[s.ID] = s
	}
	return s, err
}

func (d *scriptedDriver) Delete(_ context.Context, id string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.refuse != nil {
		return d.refuse
	}
	d.deleted = append(d.deleted, id)
	delete(d.servers, id)
	return nil
}

func (d *scriptedDriver) List(context.Context, string) ([]Server, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.listErr != nil {
		return nil, d.listErr
	}
	var out []Server
	for _, s := range d.servers {
		out = append(out, s)
	}
	return out, nil
}

func newScripted(t *testing.T, d *scriptedDriver, cfg config.CloudProvider) *Provider {
	t.Helper()
	return newScriptedOn(t, d, d, cfg)
}

// newScriptedOn runs a provider on drv, which is d or wraps it.
func newScriptedOn(t *testing.T, drv Driver, d *scriptedDriver, cfg config.CloudProvider) *Provider {
	t.Helper()
	d.servers = map[string]Server{}
	cfg.Port, cfg.Interval = 8080, 50*time.Millisecond
	p, err := New("scripted", drv, cfg, Options{Owner: "me"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { p.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return p
}

func startSpec() provider.Spec { return provider.Spec{Group: "web", Name: "web-001", Index: 1} }

// TestCreateRetriedUntilTimeout: a cloud that keeps saying "later" is
// asked again with back-off (1 s, then 2 s) until create_timeout, then the
// start fails with its last answer.
func TestCreateRetriedUntilTimeout(t *testing.T) {
	d := &scriptedDriver{create: func(int) (Server, error) {
		return Server{}, fmt.Errorf("InsufficientInstanceCapacity: %w", ErrRetryable)
	}}
	p := newScripted(t, d, config.CloudProvider{CreateTimeout: 2500 * time.Millisecond})
	begin := time.Now()
	_, err := p.Start(context.Background(), startSpec())
	if err == nil || !strings.Contains(err.Error(), "InsufficientInstanceCapacity") || !strings.Contains(err.Error(), "gave up") {
		t.Fatalf("start: %v", err)
	}
	if took := time.Since(begin); took < 2*time.Second || took > 4*time.Second {
		t.Errorf("gave up after %s, want create_timeout (2.5 s)", took)
	}
	// Asked at 0 s and 1 s; the next, at 3 s, is past create_timeout.
	if n := p.Calls().Create; n != 2 {
		t.Errorf("%d creates, want 2", n)
	}
}

// TestGoneWhileBooting: a server the cloud lists as gone before it runs
// fails the start at once, and is deleted (it may still cost).
func TestGoneWhileBooting(t *testing.T) {
	d := &scriptedDriver{create: func(int) (Server, error) {
		return Server{ID: "i-1", Name: "web-001", Phase: Gone, State: "terminated"}, nil
	}}
	p := newScripted(t, d, config.CloudProvider{BootTimeout: time.Minute})
	begin := time.Now()
	_, err := p.Start(context.Background(), startSpec())
	if err == nil || !strings.Contains(err.Error(), "gone while booting (state terminated)") {
		t.Fatalf("start: %v", err)
	}
	if took := time.Since(begin); took > 5*time.Second {
		t.Errorf("failed after %s, not at the first listing", took)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.deleted) != 1 || d.deleted[0] != "i-1" {
		t.Errorf("deleted %v, want i-1", d.deleted)
	}
}

// TestNotRetryable: any other error fails the start at once, unretried.
func TestNotRetryable(t *testing.T) {
	d := &scriptedDriver{create: func(int) (Server, error) { return Server{}, errors.New("InvalidAMIID.NotFound") }}
	p := newScripted(t, d, config.CloudProvider{})
	if _, err := p.Start(context.Background(), startSpec()); err == nil || !strings.Contains(err.Error(), "InvalidAMIID.NotFound") {
		t.Fatalf("start: %v", err)
	}
	if n := p.Calls().Create; n != 1 {
		t.Errorf("%d creates, want 1", n)
	}
}

// TestDeleteRefusedLeavesServer: a deletion the cloud refuses (a group
// retiring the instance during an outage) leaves nothing behind that
// would delete the server later while it serves again; one it accepts is
// not asked again by Stop, which only waits for the server to go.
func TestDeleteRefusedLeavesServer(t *testing.T) {
	d := &scriptedDriver{create: func(int) (Server, error) {
		return Server{ID: "i-1", Name: "web-001", IP: "10.0.0.1", Phase: Running, State: "running"}, nil
	}}
	p := newScripted(t, d, config.CloudProvider{DeleteTimeout: time.Minute})
	ctx := context.Background()
	in, err := p.Start(ctx, startSpec())
	if err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	d.refuse = fmt.Errorf("503 Service Unavailable: %w", ErrRetryable)
	d.mu.Unlock()
	if err := p.Delete(ctx, in); err == nil || !strings.Contains(err.Error(), "delete instance web-001: delete server i-1: 503 Service Unavailable") {
		t.Fatalf("Delete during the outage = %v", err)
	}
	if n := p.Calls().Delete; n != 1 {
		t.Fatalf("%d delete calls, want 1: Delete asks once", n)
	}
	d.mu.Lock()
	d.refuse = nil
	d.mu.Unlock()
	time.Sleep(300 * time.Millisecond) // listings at 50 ms: nothing deletes it behind the group's back
	p.mu.Lock()
	doomed := len(p.doomed)
	p.mu.Unlock()
	if n := p.Calls().Delete; n != 1 || doomed != 0 {
		t.Fatalf("after a refused Delete: %d delete calls, %d servers doomed; want 1 and none", n, doomed)
	}
	select {
	case <-in.Done():
		t.Fatalf("instance exited after a refused Delete: %s", in.ExitReason())
	default:
	}

	if err := p.Delete(ctx, in); err != nil {
		t.Fatalf("Delete once the API is back: %v", err)
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := in.Stop(sctx); err != nil {
		t.Fatalf("Stop after Delete: %v", err)
	}
	if n := p.Calls().Delete; n != 2 {
		t.Errorf("%d delete calls, want 2: Stop does not ask again", n)
	}
	if r := in.ExitReason(); r != "stopped" {
		t.Errorf("exit reason %q, want stopped", r)
	}
}

// sweepingDriver is a scriptedDriver that leaves strays of its own (a
// Sweeper): sweeps fail while failSweeps > 0.
type sweepingDriver struct {
	scriptedDriver
	failSweeps int
	sweeps     int
}

func (d *sweepingDriver) SweepStrays(_ context.Context, owner string) ([]string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sweeps++
	if d.failSweeps > 0 {
		d.failSweeps--
		return nil, errors.New("503 Service Unavailable")
	}
	return []string{"note of " + owner}, nil
}

// TestDriverStraysSweptUntilSwept: StopStrays has a Sweeper driver sweep
// its own strays; a sweep that fails is retried at the poller's next
// listings until one works, and then no more.
func TestDriverStraysSweptUntilSwept(t *testing.T) {
	d := &sweepingDriver{failSweeps: 2}
	p := newScriptedOn(t, d, &d.scriptedDriver, config.CloudProvider{})
	if _, err := p.StopStrays(context.Background(), nil); err == nil || !strings.Contains(err.Error(), "driver's strays: 503 Service Unavailable") {
		t.Fatalf("StopStrays with a failing sweep = %v, want the driver's error", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		d.mu.Lock()
		n := d.sweeps
		d.mu.Unlock()
		p.mu.Lock()
		pending := p.pendingSweep != nil
		p.mu.Unlock()
		if n >= 3 && !pending {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sweeps, pending %v after 5 s; want the third to work and none pending", n, pending)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // a few more listings
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.sweeps != 3 {
		t.Fatalf("%d sweeps, want 3: none after one worked", d.sweeps)
	}
}

// slowDriver is a scriptedDriver whose servers shut down slowly, as a
// sacloud server does gracefully: Delete reports the accepted shutdown
// (Accepted), then waits until the server is down to delete it.
type slowDriver struct {
	scriptedDriver
	shutdown time.Duration
	downAt   map[string]time.Time // by ID, once asked
}

func (d *slowDriver) Delete(ctx context.Context, id string) error {
	d.mu.Lock()
	at, ok := d.downAt[id]
	if !ok {
		at = time.Now().Add(d.shutdown)
		d.downAt[id] = at
		if s, ok := d.servers[id]; ok {
			s.Phase, s.State = Stopping, "cleaning"
			d.servers[id] = s
		}
	}
	d.mu.Unlock()
	Accepted(ctx)
	t := time.NewTimer(time.Until(at))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("wait for the shutdown: %w", ctx.Err())
	case <-t.C:
	}
	return d.scriptedDriver.Delete(ctx, id)
}

// TestSlowShutdownAccepted: a server that takes longer to shut down than
// the group can wait for an answer is deleted once its shutdown is
// accepted: Delete answers at once, and Stop waits for it to go (within
// delete_timeout) without asking again. A call that times out after the
// acceptance leaves the server to the poller, never to serve again.
func TestSlowShutdownAccepted(t *testing.T) {
	running := func(int) (Server, error) {
		return Server{ID: "i-1", Name: "web-001", IP: "10.0.0.1", Phase: Running, State: "running"}, nil
	}
	t.Run("within delete_timeout", func(t *testing.T) {
		d := &slowDriver{scriptedDriver: scriptedDriver{create: running}, shutdown: 2 * time.Second, downAt: map[string]time.Time{}}
		p := newScriptedOn(t, d, &d.scriptedDriver, config.CloudProvider{DeleteTimeout: 30 * time.Second})
		ctx := context.Background()
		in, err := p.Start(ctx, startSpec())
		if err != nil {
			t.Fatal(err)
		}
		begin := time.Now()
		if err := p.Delete(ctx, in); err != nil {
			t.Fatalf("Delete of a server shutting down slowly: %v", err)
		}
		if took := time.Since(begin); took > time.Second {
			t.Errorf("Delete answered after %s, not at the accepted shutdown", took)
		}
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := in.Stop(sctx); err != nil {
			t.Fatalf("Stop after an accepted Delete: %v", err)
		}
		if took := time.Since(begin); took < 2*time.Second {
			t.Errorf("Stop returned after %s, before the server was down", took)
		}
		if n := p.Calls().Delete; n != 1 {
			t.Errorf("%d delete calls, want 1", n)
		}
		if r := in.ExitReason(); r != "stopped" {
			t.Errorf("exit reason %q, want stopped", r)
		}
	})
	t.Run("past delete_timeout", func(t *testing.T) {
		d := &slowDriver{scriptedDriver: scriptedDriver{create: running}, shutdown: time.Minute, downAt: map[string]time.Time{}}
		p := newScriptedOn(t, d, &d.scriptedDriver, config.CloudProvider{DeleteTimeout: 500 * time.Millisecond})
		ctx := context.Background()
		in, err := p.Start(ctx, startSpec())
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Delete(ctx, in); err != nil {
			t.Fatalf("Delete of a server shutting down slowly: %v", err)
		}
		time.Sleep(time.Second) // the driver's call has timed out
		p.mu.Lock()
		dm := p.doomed["i-1"]
		still := dm != nil && !dm.inFlight
		p.mu.Unlock()
		if !still {
			t.Fatalf("after the accepted call timed out: doomed %+v; want the server left to the poller", dm)
		}
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := in.Stop(sctx); err == nil || !strings.Contains(err.Error(), "its deletion is retried") {
			t.Errorf("Stop = %v, want the deletion still under way", err)
		}
		if n := p.Calls().Delete; n != 1 {
			t.Errorf("%d delete calls, want 1: Stop does not ask again, the poller does every %s", n, reapEvery)
		}
	})
}

// TestReachable: Reachable answers with a listing made after it was
// asked: the API's error during an outage, nil once it answers.
func TestReachable(t *testing.T) {
	d := &scriptedDriver{}
	p := newScripted(t, d, config.CloudProvider{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Reachable(ctx); err != nil {
		t.Fatalf("Reachable while the API answers: %v", err)
	}
	d.mu.Lock()
	d.listErr = errors.New("503 Service Unavailable")
	d.mu.Unlock()
	if err := p.Reachable(ctx); err == nil || !strings.Contains(err.Error(), "list servers: 503 Service Unavailable") {
		t.Fatalf("Reachable during an outage = %v", err)
	}
	d.mu.Lock()
	d.listErr = nil
	d.mu.Unlock()
	if err := p.Reachable(ctx); err != nil {
		t.Fatalf("Reachable once the API is back: %v", err)
	}
}

// TestStartCountsFromCreate: an instance counts (Record.StartedAt) from
// its server's create, not its boot, as the cloud bills it; a server that
// never boots is reported with its create time (provider.CreatedError).
func TestStartCountsFromCreate(t *testing.T) {
	pending := func(int) (Server, error) {
		return Server{ID: "i-1", Name: "web-001", Phase: Pending, State: "pending"}, nil
	}
	t.Run("booted", func(t *testing.T) {
		d := &scriptedDriver{create: pending}
		p := newScripted(t, d, config.CloudProvider{BootTimeout: time.Minute})
		go func() {
			time.Sleep(time.Second)
			d.mu.Lock()
			defer d.mu.Unlock()
			s := d.servers["i-1"]
			s.Phase, s.State, s.IP = Running, "running", "10.0.0.1"
			d.servers["i-1"] = s
		}()
		begin := time.Now()
		in, err := p.Start(context.Background(), startSpec())
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(begin); took < time.Second {
			t.Fatalf("booted after %s, before the listing showed it running", took)
		}
		if at := in.Record().StartedAt; at.Before(begin) || at.Sub(begin) > 500*time.Millisecond {
			t.Errorf("StartedAt %s after the Start, want the create's time (at once), not the boot's", at.Sub(begin))
		}
	})
	t.Run("never booted", func(t *testing.T) {
		d := &scriptedDriver{create: pending}
		p := newScripted(t, d, config.CloudProvider{BootTimeout: 500 * time.Millisecond})
		begin := time.Now()
		_, err := p.Start(context.Background(), startSpec())
		var created *provider.CreatedError
		if !errors.As(err, &created) || !strings.Contains(err.Error(), "not running within boot_timeout") {
			t.Fatalf("start = %v, want a CreatedError for the boot timeout", err)
		}
		if at := created.Created; at.Before(begin) || at.Sub(begin) > 300*time.Millisecond {
			t.Errorf("Created %s after the Start, want the create's time", at.Sub(begin))
		}
	})
}
