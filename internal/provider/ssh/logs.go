package ssh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/shoal-lb/shoal/internal/provider"
)

// Logs writes an instance's log from its host: the last opts.Lines lines
// (all with 0), then, with opts.Follow, what is appended until ctx ends
// (closing the session ends the remote tail).
func (p *Provider) Logs(ctx context.Context, rec provider.Record, opts provider.LogOptions, w io.Writer) error {
	hostName := rec.Host
	if d, err := decode(rec.Data); err == nil && d.Host != "" {
		hostName = d.Host
	}
	if err := provider.CheckName(rec.Name); err != nil {
		return fmt.Errorf("logs: %w", err)
	}
	h := p.hostOf(hostName)
	if h == nil {
		return fmt.Errorf("logs of %s: host %q is not in provider %s", rec.Name, hostName, p.name)
	}
	p.waitFirst(ctx, h)
	if d, err := decode(rec.Data); err == nil && d.Container != "" {
		err := p.containerLogs(ctx, h, d, opts, w)
		if err != nil && ctx.Err() != nil && opts.Follow {
			return nil // followed until told to stop
		}
		if err != nil {
			return fmt.Errorf("logs of %s on %s: %w", rec.Name, h.name, err)
		}
		return nil
	}
	n := "+1"
	if opts.Lines > 0 {
		n = strconv.Itoa(opts.Lines)
	}
	argv := []string{"tail", "-n", n}
	if opts.Follow {
		argv = append(argv, "-F")
	}
	// The log is named for the process's marker: a warm pool's process
	// keeps its pool name once it serves as an instance.
	logName := rec.Name
	if d, err := decode(rec.Data); err == nil && d.Marker != "" && provider.CheckName(d.Marker) == nil {
		logName = d.Marker
	}
	argv = append(argv, "--", path.Join(p.logDir(), logName+".log"))
	_, err := p.exec(ctx, h, argv, runOpts{Stdout: w})
	if err != nil && ctx.Err() != nil && opts.Follow {
		return nil // followed until told to stop
	}
	if err != nil {
		return fmt.Errorf("logs of %s on %s: %w", rec.Name, h.name, err)
	}
	return nil
}

// rotateLogs rotates h's instance logs past the size limit and deletes
// those of instances gone for longer than the retention, in one command.
// The names of every instance p runs (on any host: hosts may share a file
// system) are kept whatever their age.
func (p *Provider) rotateLogs(ctx context.Context, h *host) error {
	p.mu.Lock()
	live := make(map[string]bool)
	for _, o := range p.hosts {
		for name := range o.insts {
			live[name] = true
		}
		for name := range o.pending {
			live[name] = true
		}
	}
	p.mu.Unlock()
	cfg := p.opts.Logs
	minutes := max(int((cfg.Retention.Minutes())+0.999), 1)
	_, err := p.sh(ctx, h, 0, script(rotateScript, p.logDir(), strconv.FormatInt(cfg.MaxSize, 10), strconv.Itoa(cfg.Keep),
		strconv.Itoa(minutes), strings.Join(slices.Sorted(maps.Keys(live)), "\n")))
	if err != nil && !errors.Is(err, provider.ErrHostDown) {
		return fmt.Errorf("rotate logs: %w", err)
	}
	return err
}
