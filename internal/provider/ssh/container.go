package ssh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/distribution/reference"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/container"
	"github.com/shoal-lb/shoal/internal/proc"
	"github.com/shoal-lb/shoal/internal/provider"
)

// A template with an image runs as a container (package container) on its
// host, through the host's runtime over the same connection. Its process
// is on the host's process table and carries the marker variables (as
// --env), so that the polls, adoption's verification, the sweeps and the
// reconciliation of a returning host see it as they see a process; its
// start, stop and logs are the runtime's, and its labels (shoal.owner,
// shoal.host, shoal.instance) find what a sweep removes beside what the
// markers find: a container left created or exited.

var _ provider.Preparer = (*Provider)(nil)

// pullTimeout bounds one pull on a host; an image of a few hundred MB
// over a slow link takes minutes.
const pullTimeout = 10 * time.Minute

// runner runs a runtime's argv on h (see container.Runner), bounded by
// timeout (0 for a streamed read: ctx only).
type runner struct {
	p       *Provider
	h       *host
	timeout time.Duration
}

// mergeScript runs its arguments with stderr on stdout: a runtime writes a
// container's stderr to its own.
const mergeScript = `exec "$@" 2>&1`

func (r runner) Run(ctx context.Context, argv []string, w io.Writer) ([]byte, error) {
	if w != nil {
		argv = script(mergeScript, argv...)
	}
	out, err := r.p.exec(ctx, r.h, argv, runOpts{Stdout: w, Timeout: r.timeout})
	if err != nil {
		return out, fmt.Errorf("%s %s on host %s: %w", argv[0], argv[1], r.h.name, err)
	}
	return out, nil
}

// cmdRunner is h's runner for commands that end within a stop's grace.
func (p *Provider) cmdRunner(h *host, grace time.Duration) runner {
	ct, _, _ := p.settings()
	return runner{p: p, h: h, timeout: grace + ct + 30*time.Second}
}

// noteRuntime adds rt to the runtimes the sweeps look through.
func (p *Provider) noteRuntime(rt string) {
	if rt == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.runtimes == nil {
		p.runtimes = make(map[string]bool)
	}
	p.runtimes[rt] = true
}

// Prepare pulls a container template's image on every host that is up,
// in parallel, and fails with every host's error if one fails; a process
// template needs nothing. A host that is not connected pulls it when an
// instance is started there.
func (p *Provider) Prepare(ctx context.Context, t config.Template) error {
	if !t.IsContainer() {
		return nil
	}
	p.noteRuntime(t.Runtime)
	p.noteImage(t)
	p.mu.Lock()
	var hosts []*host
	for _, name := range slices.Sorted(maps.Keys(p.hosts)) {
		if h := p.hosts[name]; h.client != nil && !h.removed {
			hosts = append(hosts, h)
		}
	}
	p.mu.Unlock()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, h := range hosts {
		wg.Go(func() {
			if err := container.Pull(ctx, runner{p: p, h: h, timeout: pullTimeout}, &t); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("on host %s: %w", h.name, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// noteImage remembers t as the newest template of its image's repository
// (one per repository, so that a deploy replaces its predecessor): what a
// host that connects pulls ahead of its first instance.
func (p *Provider) noteImage(t config.Template) {
	named, err := reference.ParseNormalizedNamed(t.Image)
	if err != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.images == nil {
		p.images = make(map[string]config.Template)
	}
	p.images[named.Name()] = t
}

// pullAhead pulls, in the background on h that just connected, the images
// of the container templates started or prepared so far, unless they are
// there already: a new host (or one back) has them before an instance is
// placed there. A failure is logged; a start there pulls again.
func (p *Provider) pullAhead(ctx context.Context, h *host) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.images) == 0 || p.run == nil {
		return
	}
	tmpls := slices.Collect(maps.Values(p.images))
	p.run.wg.Go(func() {
		for _, t := range tmpls {
			if err := container.Ensure(ctx, runner{p: p, h: h, timeout: pullTimeout}, &t); err != nil {
				if ctx.Err() == nil {
					p.log.Warn("pulling an image ahead on a connected host failed; a start there pulls it again", "host", h.name, "image", t.Image, "err", err)
				}
				continue
			}
			p.log.Info("image on the host ahead of its instances", "host", h.name, "image", t.Image)
		}
	})
}

// launchContainer runs spec's container on h with port published on the
// host's address; its image is pulled first unless it is there already.
// It returns the data of its process.
func (p *Provider) launchContainer(ctx context.Context, h *host, spec provider.Spec, port int) (data, error) {
	tmpl := spec.Template
	p.noteRuntime(tmpl.Runtime)
	p.noteImage(tmpl)
	args, env, err := tmpl.Expand(config.TemplateData{Name: spec.Name, Host: h.name, Port: port, Index: spec.Index, Group: spec.Group})
	if err != nil {
		return data{}, fmt.Errorf("expand template: %w", err)
	}
	if err := container.Ensure(ctx, runner{p: p, h: h, timeout: pullTimeout}, &tmpl); err != nil {
		return data{}, err
	}
	cs := container.Spec{Name: container.Name(spec.Name, time.Now()), Owner: p.owner, Host: h.name, Instance: spec.Name, Group: spec.Group,
		HostAddr: h.name, HostPort: port, Args: args, Env: slices.Concat(env, p.markers(h, spec.Name))}
	r := p.cmdRunner(h, tmpl.StopTimeout)
	info, err := container.Run(ctx, r, &tmpl, cs)
	if err != nil {
		return data{}, err
	}
	// The start time that tells the process from a reused pid.
	start, err := p.startTicks(ctx, h, info.PID)
	if err != nil {
		_ = container.Stop(context.WithoutCancel(ctx), r, tmpl.Runtime, info.ID, tmpl.StopTimeout)
		return data{}, fmt.Errorf("container %s: read its process: %w", cs.Name, err)
	}
	return data{Host: h.name, PID: info.PID, PIDStart: start, Port: port, Marker: spec.Name, Container: info.ID, Runtime: tmpl.Runtime}, nil
}

// statScript prints the stat line of pid $1.
const statScript = `read -r s </proc/$1/stat && echo "$s"`

// startTicks reads pid's start time on h.
func (p *Provider) startTicks(ctx context.Context, h *host, pid int) (uint64, error) {
	out, err := p.sh(ctx, h, 0, script(statScript, fmt.Sprint(pid)))
	if err != nil {
		return 0, err
	}
	st, err := proc.ParseStat(out)
	if err != nil {
		return 0, fmt.Errorf("process %d: %w", pid, err)
	}
	return st.StartTicks, nil
}

// stopContainer stops in's container with the runtime's stop (grace:
// stop_timeout) and removes it.
func (in *instance) stopContainer(ctx context.Context) error {
	return container.Stop(ctx, in.p.cmdRunner(in.h, in.tmpl.StopTimeout), in.d.Runtime, in.d.Container, in.tmpl.StopTimeout)
}

// containerLogs writes a container's output from its host, as its runtime
// keeps it.
func (p *Provider) containerLogs(ctx context.Context, h *host, d data, opts provider.LogOptions, w io.Writer) error {
	_, err := runner{p: p, h: h}.Run(ctx, container.LogsArgv(d.Runtime, d.Container, opts.Lines, opts.Follow), w)
	return err
}

// sweepContainers removes, on h, the containers labelled with this owner
// and host that no instance runs in and keep does not name: those a
// crashed shoal left created or exited, and running ones the markers'
// sweep has not met (a runtime that moved their process).
func (p *Provider) sweepContainers(ctx context.Context, h *host, keep map[string]bool) ([]provider.Record, error) {
	p.mu.Lock()
	runtimes := slices.Sorted(maps.Keys(p.runtimes))
	kept := maps.Clone(keep)
	if kept == nil {
		kept = map[string]bool{}
	}
	for _, in := range h.insts {
		if in.d.Container != "" {
			kept[in.d.Container] = true
		}
	}
	p.mu.Unlock()
	var recs []provider.Record
	var errs []error
	for _, rt := range runtimes {
		r := p.cmdRunner(h, strayGrace)
		infos, err := container.List(ctx, r, rt, p.owner, h.name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, info := range infos {
			if kept[info.ID] {
				continue
			}
			name := info.Labels[container.LabelInstance]
			p.log.Warn("removing stray container", "instance", name, "host", h.name, "container", info.Name, "status", info.Status)
			if err := container.Stop(ctx, r, rt, info.ID, strayGrace); err != nil {
				errs = append(errs, fmt.Errorf("stray container of %s on %s: %w", name, h.name, err))
				continue
			}
			recs = append(recs, data{Host: h.name, PID: info.PID, Marker: name, Container: info.ID, Runtime: rt}.record(name))
		}
	}
	return recs, errors.Join(errs...)
}
