package local

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/container"
	"github.com/shoal-lb/shoal/internal/proc"
	"github.com/shoal-lb/shoal/internal/provider"
	"github.com/shoal-lb/shoal/internal/testcontainer"
)

// containerTemplate runs the demo backend's image, listening on 8080 inside.
func containerTemplate(image string) config.Template {
	return config.Template{Image: image, Port: 8080, Runtime: config.RuntimePodman, InsecureRegistry: true,
		Args: []string{"--listen", ":8080", "--name", "{{.Name}}"}, Env: map[string]string{"GREETING": "{{.Group}}"},
		StopTimeout: 3 * time.Second}
}

// whoAnswers asks addr for / until it answers (at most 10 s) and returns
// its X-Instance.
func whoAnswers(t *testing.T, addr string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/")
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.Header.Get("X-Instance")
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestContainerLifecycle runs an image pulled from a registry on
// 127.0.0.1 as an instance: it serves on its published port, its process
// is on this machine's table (sampled as a process), its logs are the
// runtime's; a second provider of the same state directory adopts it by
// its labels, a third one's sweep removes it as a stray, and a stop
// leaves no container.
func TestContainerLifecycle(t *testing.T) {
	testcontainer.Podman(t)
	reg := testcontainer.StartRegistry(t)
	image := reg.PushDemo(t, "shoaltest/local", "1")
	dir := t.TempDir()
	p := New(dir, nil)
	testcontainer.Sweep(t, reg, container.LabelOwner+"="+p.owner)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	tmpl := containerTemplate(image)
	in, err := p.Start(ctx, provider.Spec{Group: "web", Name: "web-001", Index: 1, Template: tmpl})
	if err != nil {
		t.Fatal(err)
	}
	rec := in.Record()
	if got := whoAnswers(t, rec.Addr); got != "web-001" {
		t.Fatalf("X-Instance = %q, want web-001", got)
	}
	if _, err := proc.StartTicks(in.PID()); err != nil || in.PID() <= 0 {
		t.Fatalf("the container's process %d is not on this machine: %v", in.PID(), err)
	}
	if ids := testcontainer.Containers(t, container.LabelOwner+"="+p.owner, container.LabelInstance+"=web-001"); len(ids) != 1 {
		t.Fatalf("containers labelled web-001: %v, want 1", ids)
	}
	var logs bytes.Buffer
	if err := p.Logs(ctx, rec, provider.LogOptions{Lines: 10}, &logs); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "serving") {
		t.Fatalf("logs lack the backend's start line:\n%s", logs.String())
	}

	// After a restart: adopted by its record and labels; kept by the sweep.
	p2 := New(dir, nil)
	adopted, err := p2.Adopt(ctx, rec, tmpl)
	if err != nil {
		t.Fatal(err)
	}
	if stopped, err := p2.StopStrays(ctx, []provider.Record{rec}); err != nil || len(stopped) != 0 {
		t.Fatalf("sweep with the record kept stopped %v (err %v), want nothing", stopped, err)
	}
	if got := whoAnswers(t, rec.Addr); got != "web-001" {
		t.Fatalf("after adoption X-Instance = %q", got)
	}
	// Another shoal's provider never adopts it.
	other := New(t.TempDir(), nil)
	if _, err := other.Adopt(ctx, rec, tmpl); !errors.Is(err, provider.ErrGone) {
		t.Fatalf("another owner adopted the container: %v", err)
	}

	// A restart that did not record it sweeps it (its runtime named).
	p3 := New(dir, nil)
	p3.UseRuntimes(config.RuntimePodman)
	stopped, err := p3.StopStrays(ctx, nil)
	if err != nil || len(stopped) != 1 || stopped[0].Name != "web-001" {
		t.Fatalf("sweep without the record stopped %v (err %v), want web-001", stopped, err)
	}
	select {
	case <-adopted.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the adopted instance's Done did not close after its container was swept")
	}
	if ids := testcontainer.Containers(t, container.LabelOwner+"="+p.owner, container.LabelInstance+"=web-001"); len(ids) != 0 {
		t.Fatalf("containers left after the sweep: %v", ids)
	}

	// A new start, stopped by the runtime's stop: gone, nothing left.
	in, err = p.Start(ctx, provider.Spec{Group: "web", Name: "web-002", Index: 2, Template: tmpl})
	if err != nil {
		t.Fatal(err)
	}
	whoAnswers(t, in.Record().Addr)
	began := time.Now()
	if err := in.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// The backend stops at once on SIGTERM; a SIGKILL after the grace
	// would show as 3 s.
	if took := time.Since(began); took > 2500*time.Millisecond {
		t.Errorf("stop took %s: the container did not stop on its stop signal", took)
	}
	select {
	case <-in.Done():
	default:
		t.Fatal("Done not closed after Stop")
	}
	if ids := testcontainer.Containers(t, container.LabelOwner+"="+p.owner); len(ids) != 0 {
		t.Fatalf("containers left after Stop: %v", ids)
	}
}

// TestContainerPullFailure: an image whose tag the registry lacks fails
// Prepare and Start with the runtime's words, and starts nothing; so does
// a registry that is down.
func TestContainerPullFailure(t *testing.T) {
	testcontainer.Podman(t)
	reg := testcontainer.StartRegistry(t)
	reg.PushDemo(t, "shoaltest/pull", "1")
	p := New(t.TempDir(), nil)
	testcontainer.Sweep(t, reg, container.LabelOwner+"="+p.owner)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	missing := containerTemplate(reg.Ref("shoaltest/pull", "no-such-tag"))
	err := p.Prepare(ctx, missing)
	if err == nil || !strings.Contains(err.Error(), "no-such-tag") || !strings.Contains(strings.ToLower(err.Error()), "manifest unknown") {
		t.Fatalf("Prepare of a missing tag: %v, want the runtime's manifest unknown", err)
	}
	if _, err := p.Start(ctx, provider.Spec{Group: "web", Name: "web-001", Index: 1, Template: missing}); err == nil || !strings.Contains(strings.ToLower(err.Error()), "manifest unknown") {
		t.Fatalf("Start of a missing tag: %v, want the runtime's manifest unknown", err)
	}
	down := containerTemplate("127.0.0.1:1/shoaltest/pull:1")
	if err := p.Prepare(ctx, down); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Prepare from a registry that is down: %v, want connection refused", err)
	}
	if ids := testcontainer.Containers(t, container.LabelOwner+"="+p.owner); len(ids) != 0 {
		t.Fatalf("failed starts left containers: %v", ids)
	}
}
