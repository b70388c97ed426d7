package local

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/proc"
	"github.com/shoal-lb/shoal/internal/provider"
)

func shHook(script string, timeout time.Duration) *config.Hook {
	return &config.Hook{Command: []string{"/bin/sh", "-c", script, "hook", "{{.Name}}", "{{.Port}}"}, Timeout: timeout}
}

func readLog(t *testing.T, p *Provider, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(p.stateDir, "logs", name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPreStartFailureFailsTheStart: a pre_start that exits non-zero fails
// Start with its exit status, starts no instance, and leaves its output and
// shoal's account of it in the instance's log.
func TestPreStartFailureFailsTheStart(t *testing.T) {
	p := New(t.TempDir(), nil)
	tmpl := helperTemplate(t, "serve")
	tmpl.PreStart = shHook(`echo "syncing $1 port $2 hook $SHOAL_HOOK"; exit 3`, 10*time.Second)
	inst, err := p.Start(context.Background(), provider.Spec{Group: "web", Name: "web-001", Index: 1, Template: tmpl})
	if err == nil {
		stop(t, inst)
		t.Fatal("Start succeeded with a failing pre_start")
	}
	if !strings.Contains(err.Error(), "pre_start: exit status 3") {
		t.Fatalf("error %q does not name the hook's exit status", err)
	}
	log := readLog(t, p, "web-001")
	for _, want := range []string{"shoal: pre_start: running", "syncing web-001 port", "hook pre_start", "pre_start failed after"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, "helper serve starting") {
		t.Errorf("the instance started although pre_start failed:\n%s", log)
	}
	if len(p.ports) != 0 {
		t.Errorf("ports still reserved: %v", p.ports)
	}
}

// TestPreStartTimeoutKillsItsGroup: a hook past its timeout is killed with
// everything it started, and the start fails saying so.
func TestPreStartTimeoutKillsItsGroup(t *testing.T) {
	p := New(t.TempDir(), nil)
	pidFile := filepath.Join(t.TempDir(), "pid")
	tmpl := helperTemplate(t, "serve")
	tmpl.PreStart = shHook(`echo $$ > `+pidFile+`; sleep 60 & sleep 60`, 500*time.Millisecond)
	began := time.Now()
	inst, err := p.Start(context.Background(), provider.Spec{Group: "web", Name: "web-002", Index: 2, Template: tmpl})
	if err == nil {
		stop(t, inst)
		t.Fatal("Start succeeded with a hanging pre_start")
	}
	if !strings.Contains(err.Error(), "timed out after 500ms") {
		t.Fatalf("error %q does not say the hook timed out", err)
	}
	if d := time.Since(began); d > 10*time.Second {
		t.Fatalf("Start took %s with a 500ms hook timeout", d)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pgid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if pgid <= 0 || proc.GroupRunning(pgid) {
		t.Fatalf("the hook's process group %d still runs", pgid)
	}
}

// TestHooksRunAroundTheInstance: pre_start runs before the instance, and
// PreStop runs the pre_stop hook with the instance's fields, both logged.
func TestHooksRunAroundTheInstance(t *testing.T) {
	p := New(t.TempDir(), nil)
	tmpl := helperTemplate(t, "serve")
	tmpl.PreStart = shHook(`echo "prepared $1"`, 10*time.Second)
	tmpl.PreStop = shHook(`echo "deregistering $1 on $2"`, 10*time.Second)
	inst := start(t, p, "web-003", tmpl)
	get(t, addrPort(inst.Record().Addr))
	if err := inst.PreStop(context.Background()); err != nil {
		t.Fatal(err)
	}
	log := readLog(t, p, "web-003")
	prep := strings.Index(log, "prepared web-003")
	started := strings.Index(log, "helper serve starting")
	dereg := strings.Index(log, "deregistering web-003 on "+strconv.Itoa(addrPort(inst.Record().Addr)))
	if prep < 0 || started < 0 || dereg < 0 || prep > started {
		t.Fatalf("want pre_start output before the instance's and pre_stop output in the log:\n%s", log)
	}
	if !strings.Contains(log, "shoal: pre_stop done in") {
		t.Fatalf("log lacks shoal's pre_stop line:\n%s", log)
	}
}
