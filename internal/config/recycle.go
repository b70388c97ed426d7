package config

import (
	"slices"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/disruption"
)

// Update is how a group's instances follow a change of its serving
// template (a deploy, or a restart that serves another one): an instance
// started from another template has drifted.
type Update struct {
	// Mode is UpdateOpportunistic (a drifted instance is replaced only when
	// it would be anyway: lifetime, scale-in, failure) or UpdateProactive
	// (the recycler replaces drifted instances within the disruption
	// budget).
	Mode string `yaml:"mode"`
}

// The update modes.
const (
	UpdateOpportunistic = "opportunistic"
	UpdateProactive     = "proactive"
)

// UpdateModes lists the valid update modes.
var UpdateModes = []string{UpdateOpportunistic, UpdateProactive}

// Disruption is the budget of a group's voluntary replacements (lifetime,
// drift, host drain, consolidation): health replacements and scaling ignore it.
type Disruption struct {
	// MaxUnavailable is how many instances may be out of service at once
	// for a voluntary replacement: a count ("1") or a share of the group
	// ("10%", at least one).
	MaxUnavailable string `yaml:"max_unavailable"`
	// Windows are when such a replacement may start, "[DAYS] HH:MM-HH:MM
	// [ZONE]" ("Mon-Fri 02:00-05:00 Asia/Tokyo"; every day, UTC when left
	// out; an end before the start runs past midnight); none: any time.
	Windows []string `yaml:"windows"`

	// Budget is the keys, parsed.
	Budget disruption.Budget `yaml:"-" json:"-"`
}

// defaultDisruption is one instance out at a time, at any time.
var defaultDisruption = Disruption{MaxUnavailable: "1", Budget: disruption.Budget{MaxUnavailable: 1}}

// Bounds of max_lifetime: shorter than a minute would recycle instances
// about as fast as they start and prove themselves.
const (
	minLifetime = time.Minute
	maxLifetime = 365 * 24 * time.Hour
	maxWindows  = 50
)

// recycling decodes a group's max_lifetime, update and disruption.
func (d *decoder) recycling(f *fields, g *Group) {
	if v, n := f.duration("max_lifetime", 0); n != nil && v != 0 && (v < minLifetime || v > maxLifetime) {
		d.errorf(n, f.field("max_lifetime"), "must be 0 (instances live as long as they serve) or from %s to %s, got %s", minLifetime, maxLifetime, v)
	} else {
		g.MaxLifetime = v
	}

	g.Update = defaultGroup.Update
	if n := f.get("update"); n != nil {
		uf := section[Update](d, n, f.field("update"))
		mode, mn := uf.str("mode", g.Update.Mode)
		if mn != nil && !slices.Contains(UpdateModes, mode) {
			d.errorf(mn, uf.field("mode"), "must be one of %s (whether drifted instances wait for their next replacement or are replaced within the disruption budget), got %q",
				strings.Join(UpdateModes, ", "), mode)
		} else {
			g.Update.Mode = mode
		}
	}

	g.Disruption = defaultDisruption
	n := f.get("disruption")
	if n == nil {
		return
	}
	path := f.field("disruption")
	df := section[Disruption](d, n, path)
	if mn := df.get("max_unavailable"); mn != nil {
		if s, ok := d.str(mn, df.field("max_unavailable")); ok {
			count, pct, err := disruption.ParseMaxUnavailable(strings.TrimSpace(s))
			if err != nil {
				d.errorf(mn, df.field("max_unavailable"), "%v", err)
			} else {
				g.Disruption.MaxUnavailable = s
				g.Disruption.Budget.MaxUnavailable, g.Disruption.Budget.Percent = count, pct
			}
		}
	}
	items := df.strings("windows")
	if len(items) > maxWindows {
		d.errorf(df.get("windows"), df.field("windows"), "at most %d windows, got %d", maxWindows, len(items))
		return
	}
	for _, it := range items {
		w, err := disruption.ParseWindow(it.val)
		if err != nil {
			d.errorf(it.node, it.field, "%v", err)
			continue
		}
		g.Disruption.Windows = append(g.Disruption.Windows, it.val)
		g.Disruption.Budget.Windows = append(g.Disruption.Budget.Windows, w)
	}
}
