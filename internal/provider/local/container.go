package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/container"
	"github.com/shoal-lb/shoal/internal/instance"
	"github.com/shoal-lb/shoal/internal/proc"
	"github.com/shoal-lb/shoal/internal/provider"
)

// A template with an image runs as a container (package container) on this
// machine: the instance's process is the container's, on this machine's
// process table, so it is watched, sampled and told from a reused pid as a
// process is; it is started, stopped and adopted by the runtime and its
// labels (shoal.owner = the owner marker, shoal.host = 127.0.0.1).

var _ provider.Preparer = (*Provider)(nil)

// UseRuntimes names the container runtimes whose containers StopStrays
// looks through, beside those of the instances it started or adopted: the
// runtimes of the local groups' templates, which a crashed shoal may have
// left containers in that it never recorded.
func (p *Provider) UseRuntimes(runtimes ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, rt := range runtimes {
		p.runtimes[rt] = true
	}
}

// Prepare pulls a container template's image, so that a deploy fails
// before it touches an instance when the image cannot be had; a process
// template needs nothing.
func (p *Provider) Prepare(ctx context.Context, t config.Template) error {
	if !t.IsContainer() {
		return nil
	}
	p.UseRuntimes(t.Runtime)
	if err := container.Pull(ctx, container.Local{}, &t); err != nil {
		return fmt.Errorf("on %s: %w", host, err)
	}
	return nil
}

// startContainer runs spec's container with port published on host; its
// image is pulled first unless it is here already.
func (p *Provider) startContainer(ctx context.Context, spec provider.Spec, port int) (*localInstance, error) {
	tmpl := spec.Template
	p.UseRuntimes(tmpl.Runtime)
	args, env, err := tmpl.Expand(config.TemplateData{Name: spec.Name, Host: host, Port: port, Index: spec.Index, Group: spec.Group})
	if err != nil {
		return nil, fmt.Errorf("expand template: %w", err)
	}
	r := container.Local{}
	if err := container.Ensure(ctx, r, &tmpl); err != nil {
		return nil, err
	}
	cs := container.Spec{Name: container.Name(spec.Name, time.Now()), Owner: p.owner, Host: host, Instance: spec.Name, Group: spec.Group,
		HostAddr: host, HostPort: port, Args: args, Env: env}
	info, err := container.Run(ctx, r, &tmpl, cs)
	if err != nil {
		return nil, err
	}
	start, err := proc.StartTicks(info.PID)
	var pr *proc.Process
	if err == nil {
		pr, err = proc.Adopt(info.PID, start)
	}
	if err != nil {
		// Its process ended between the inspect and now.
		_ = container.Stop(context.WithoutCancel(ctx), r, tmpl.Runtime, info.ID, tmpl.StopTimeout)
		return nil, fmt.Errorf("container %s exited at once", cs.Name)
	}
	d := procData{PID: info.PID, PIDStart: start, Marker: spec.Name, Container: info.ID, Runtime: tmpl.Runtime}
	rec := d.record(spec.Name, port)
	rec.Group, rec.Index, rec.StartedAt = spec.Group, spec.Index, time.Now()
	p.log.Debug("started container", "group", rec.Group, "instance", rec.Name, "container", cs.Name, "image", tmpl.Image, "pid", d.PID, "port", port)
	return &localInstance{rec: rec, d: d, port: port, proc: pr, stopTimeout: tmpl.StopTimeout, p: p, tmpl: tmpl}, nil
}

// adoptContainer re-attaches to a recorded container: it must be there,
// run, carry this owner's and this instance's labels, and run the recorded
// process.
func (p *Provider) adoptContainer(ctx context.Context, rec instance.Record, d procData) (*proc.Process, error) {
	p.UseRuntimes(d.Runtime)
	info, err := container.Inspect(ctx, container.Local{}, d.Runtime, d.Container)
	if errors.Is(err, container.ErrNoContainer) {
		return nil, fmt.Errorf("adopt instance %s (container %.12s): %w", rec.Name, d.Container, provider.ErrGone)
	}
	if err != nil {
		return nil, fmt.Errorf("adopt instance %s: %w", rec.Name, err)
	}
	if info.Labels[container.LabelOwner] != p.owner || info.Labels[container.LabelInstance] != rec.Name || info.Labels[container.LabelHost] != host {
		return nil, fmt.Errorf("adopt instance %s (container %.12s): not labelled as this instance: %w", rec.Name, d.Container, provider.ErrGone)
	}
	if !info.Running || info.PID != d.PID {
		return nil, fmt.Errorf("adopt instance %s (container %.12s, %s): %w", rec.Name, d.Container, info.Status, provider.ErrGone)
	}
	pr, err := proc.Adopt(d.PID, d.PIDStart)
	if errors.Is(err, proc.ErrGone) {
		return nil, fmt.Errorf("adopt instance %s (container %.12s): %w", rec.Name, d.Container, provider.ErrGone)
	}
	return pr, err
}

// stopContainerStrays stops and removes the containers labelled with this
// owner that are neither kept nor run by p's instances, in every runtime
// p knows of.
func (p *Provider) stopContainerStrays(ctx context.Context, keep []instance.Record) ([]instance.Record, error) {
	kept := make(map[string]bool)
	for _, r := range keep {
		if d, err := decode(r.Data); err == nil && d.Container != "" {
			kept[d.Container] = true
			p.UseRuntimes(d.Runtime)
		}
	}
	p.mu.Lock()
	for _, c := range p.containers {
		kept[c] = true
	}
	runtimes := slices.Sorted(maps.Keys(p.runtimes))
	p.mu.Unlock()
	r := container.Local{}
	var stopped []instance.Record
	var errs []error
	for _, rt := range runtimes {
		infos, err := container.List(ctx, r, rt, p.owner, host)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, info := range infos {
			if kept[info.ID] {
				continue
			}
			name := info.Labels[container.LabelInstance]
			p.log.Warn("stopping stray container", "instance", name, "container", info.Name, "status", info.Status)
			if err := container.Stop(ctx, r, rt, info.ID, strayGrace); err != nil {
				errs = append(errs, fmt.Errorf("stop stray instance %s: %w", name, err))
				continue
			}
			d := procData{PID: info.PID, Marker: name, Container: info.ID, Runtime: rt}
			stopped = append(stopped, d.record(name, 0))
		}
	}
	return stopped, errors.Join(errs...)
}

// stopContainer stops in's container with the runtime's stop (grace: the
// template's stop_timeout) and waits until its process is gone.
func (in *localInstance) stopContainer(ctx context.Context) error {
	if err := container.Stop(ctx, container.Local{}, in.d.Runtime, in.d.Container, in.stopTimeout); err != nil {
		// The runtime failed (it may be gone): stop the process itself,
		// and --rm removes the container.
		in.p.log.Warn("container runtime's stop failed; stopping its process", "instance", in.rec.Name, "err", err)
		return in.proc.Stop(ctx, in.stopTimeout)
	}
	select {
	case <-in.proc.Done():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// containerLogs writes a container's output as the runtime keeps it.
func (p *Provider) containerLogs(ctx context.Context, d procData, opts provider.LogOptions, w io.Writer) error {
	_, err := container.Local{}.Run(ctx, container.LogsArgv(d.Runtime, d.Container, opts.Lines, opts.Follow), w)
	if err != nil && opts.Follow && ctx.Err() != nil {
		return nil // followed until told to stop
	}
	return err
}
