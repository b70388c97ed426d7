package ssh

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/provider"
)

// errNoHost: every host refused a new instance (full, down, cordoned,
// labels); a pool's refill tries again at its next look.
var errNoHost = errors.New("no host can take it")

// candidate is a host that can take an instance.
type candidate struct {
	h              *host
	total, ofGroup int
	cores          float64
	// used is the fraction of the host's capacity in use, the larger of
	// instances and cores (0 when unbounded).
	used float64
}

// place picks the host of a new instance as spec.Placement says and
// reserves the instance's place there (capacity counts it from now on). It
// returns the host and the reason, or an error saying why each host cannot
// take it.
func (p *Provider) place(spec provider.Spec) (*host, string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	var cands []candidate
	var refusals []string
	for _, name := range slices.Sorted(maps.Keys(p.hosts)) {
		h := p.hosts[name]
		if why := p.refusal(h, spec, now); why != "" {
			refusals = append(refusals, name+": "+why)
			continue
		}
		total, ofGroup, cores := h.load(spec.Group)
		c := candidate{h: h, total: total, ofGroup: ofGroup, cores: cores}
		if n := h.cfg.Capacity.Instances; n > 0 {
			c.used = float64(total) / float64(n)
		}
		if n := h.cfg.Capacity.Cores; n > 0 {
			c.used = max(c.used, cores/n)
		}
		cands = append(cands, c)
	}
	if len(cands) == 0 {
		if len(refusals) == 0 {
			return nil, "", errors.New("no hosts")
		}
		return nil, "", fmt.Errorf("%w: %s", errNoHost, strings.Join(refusals, "; "))
	}
	strategy := spec.Placement.Strategy
	if strategy == "" {
		strategy = config.PlaceSpread
	}
	// Candidates are in name order and the sort is stable: the name is the
	// last tie-break.
	if strategy == config.PlacePack {
		slices.SortStableFunc(cands, func(a, b candidate) int {
			if a.used != b.used {
				return cmp.Compare(b.used, a.used)
			}
			return b.total - a.total
		})
	} else {
		slices.SortStableFunc(cands, func(a, b candidate) int {
			if a.ofGroup != b.ofGroup {
				return a.ofGroup - b.ofGroup
			}
			if a.used != b.used {
				return cmp.Compare(a.used, b.used)
			}
			return a.total - b.total
		})
	}
	c := cands[0]
	c.h.pending[spec.Name] = pendingStart{group: spec.Group, cpus: spec.Template.CPUs}
	var why string
	if strategy == config.PlacePack {
		why = fmt.Sprintf("pack: %s most used that fits; %s", c.h.name, c.usage())
	} else {
		why = fmt.Sprintf("spread: %d of %s's instances on %s, fewest; %s", c.ofGroup, spec.Group, c.h.name, c.usage())
	}
	return c.h, why, nil
}

// usage words a candidate's load before the new instance: "3/10 instances".
func (c candidate) usage() string {
	s := fmt.Sprintf("%d instances", c.total)
	if n := c.h.cfg.Capacity.Instances; n > 0 {
		s = fmt.Sprintf("%d/%d instances", c.total, n)
	}
	if n := c.h.cfg.Capacity.Cores; n > 0 {
		s += fmt.Sprintf(", %g/%g cores", c.cores, n)
	}
	return s
}

// cordoned reports whether an operator cordoned the host; p.mu is held.
func (p *Provider) cordoned(host string) bool {
	return p.opts.Cordoned != nil && p.opts.Cordoned(host)
}

// refusal says why h cannot take spec's instance now, "" if it can; p.mu is held.
func (p *Provider) refusal(h *host, spec provider.Spec, now time.Time) string {
	switch {
	case h.removed:
		return "removed from the config"
	case p.cordoned(h.name):
		return "cordoned (`shoal hosts uncordon " + h.name + "` takes new instances there again)"
	case p.opts.Vacating != nil && p.opts.Vacating(h.name):
		return "being emptied by a consolidation"
	case h.client == nil && h.down:
		return "down"
	case h.client == nil:
		if h.lastErr != "" {
			return "unreachable (" + h.lastErr + ")"
		}
		return "not connected yet"
	case now.Before(h.heldOffUntil):
		return "held off until " + h.heldOffUntil.UTC().Format(time.RFC3339) + " (went down recently)"
	}
	for _, k := range slices.Sorted(maps.Keys(spec.Placement.Labels)) {
		want := spec.Placement.Labels[k]
		have, ok := h.cfg.Labels[k]
		if !ok {
			return fmt.Sprintf("label %s unset, want %s", k, want)
		}
		if have != want {
			return fmt.Sprintf("label %s=%s, want %s", k, have, want)
		}
	}
	total, _, cores := h.load(spec.Group)
	if n := h.cfg.Capacity.Instances; n > 0 && total+1 > n {
		return fmt.Sprintf("capacity %d/%d instances", total, n)
	}
	if n := h.cfg.Capacity.Cores; n > 0 && cores+spec.Template.CPUs > n+1e-9 {
		return fmt.Sprintf("capacity %g/%g cores, %g more wanted", cores, n, spec.Template.CPUs)
	}
	return ""
}
