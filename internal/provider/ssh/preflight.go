package ssh

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/provider"
)

// dirScript makes the remote directory $1 and checks that it is writable.
const dirScript = `mkdir -p "$1" && [ -w "$1" ] || { echo "cannot create or write $1" >&2; exit 1; }`

// Preflight connects to every host in parallel, over a connection of its own,
// and checks what the templates (by group) need there: the host key (in
// known_hosts as the file is now), the login, a writable remote_dir, a free port in the host's range, each
// template's working directory and program. Each host is bounded by a
// deadline of a few connect_timeouts: it never hangs.
func (p *Provider) Preflight(ctx context.Context, tmpls map[string]config.Template) []provider.PreflightResult {
	p.mu.Lock()
	hosts := make([]*host, 0, len(p.hosts))
	for _, name := range slices.Sorted(maps.Keys(p.hosts)) {
		hosts = append(hosts, p.hosts[name])
	}
	p.mu.Unlock()
	results := make([]provider.PreflightResult, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Go(func() { results[i] = p.preflightHost(ctx, h, tmpls) })
	}
	wg.Wait()
	return results
}

func (p *Provider) preflightHost(ctx context.Context, h *host, tmpls map[string]config.Template) provider.PreflightResult {
	ct, _, _ := p.settings()
	ctx, cancel := context.WithTimeout(ctx, 4*ct+5*time.Second)
	defer cancel()
	p.mu.Lock()
	hc := h.cfg
	p.mu.Unlock()
	r := provider.PreflightResult{Provider: p.name, Host: h.name}
	problem := func(format string, args ...any) { r.Problems = append(r.Problems, fmt.Sprintf(format, args...)) }

	// key_file and known_hosts are read as they are now, not as they were
	// at the start: a host key taken out of known_hosts since (or a key
	// file replaced) is what the next reload or restart will meet.
	cc, err := clientConfig(hc, ct)
	if err != nil {
		problem("%v", err)
		return r
	}
	c, err := dial(ctx, hc, cc, ct)
	if err != nil {
		problem("cannot connect as %s: %v", hc.User, err)
		return r
	}
	defer c.Close()
	r.Notes = append(r.Notes, fmt.Sprintf("connected as %s; host key matches known_hosts", hc.User))
	exec := func(argv []string) ([]byte, error) { return run(ctx, c, ct, argv, runOpts{Timeout: ct}) }

	if _, err := exec(script(dirScript, p.logDir())); errors.Is(err, errHung) {
		// It took the login and runs nothing (a hung shell, a forced
		// command): every other check would wait out its timeout too.
		problem("logged in as %s, but the host runs no command: %v", hc.User, err)
		return r
	} else if err != nil {
		problem("remote_dir: %v", err)
	} else {
		r.Notes = append(r.Notes, "log directory "+p.logDir()+" writable")
	}
	if out, err := exec(script(listenScript)); err != nil {
		problem("cannot read listening ports: %v", err)
	} else {
		listening := parseListening(out)
		free, used := 0, 0
		for port := hc.Ports.Min; port <= hc.Ports.Max; port++ {
			if listening[port] {
				used++
			} else {
				free++
			}
		}
		if free == 0 {
			problem("no free port in %d-%d (%d in use)", hc.Ports.Min, hc.Ports.Max, used)
		} else {
			r.Notes = append(r.Notes, fmt.Sprintf("%d free ports in %d-%d", free, hc.Ports.Min, hc.Ports.Max))
		}
	}
	for _, group := range slices.Sorted(maps.Keys(tmpls)) {
		tmpl := tmpls[group]
		if tmpl.IsContainer() {
			// The runtime runs the image's own program.
			if _, err := exec(script(prepare, p.logDir(), ".", tmpl.Runtime)); err != nil {
				problem("template of group %s: container runtime %s: %v", group, tmpl.Runtime, remoteError(h, err, tmpl.Runtime, "."))
				continue
			}
			r.Notes = append(r.Notes, fmt.Sprintf("group %s: container runtime %s found", group, tmpl.Runtime))
			continue
		}
		argv, _, err := tmpl.Expand(config.TemplateData{Name: group + "-001", Host: h.name, Port: hc.Ports.Min, Index: 1, Group: group})
		if err != nil {
			problem("template of group %s: %v", group, err)
			continue
		}
		_, err = exec(script(prepare, p.logDir(), workDir(tmpl.Dir), argv[0]))
		if err != nil {
			problem("template of group %s: %v", group, remoteError(h, err, argv[0], tmpl.Dir))
			continue
		}
		r.Notes = append(r.Notes, fmt.Sprintf("group %s: command %s found", group, argv[0]))
	}
	r.OK = len(r.Problems) == 0
	return r
}
