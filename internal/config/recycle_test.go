package config

import (
	"strings"
	"testing"
	"time"
)

// recycleDoc is a group with the recycling keys in its last lines.
func recycleDoc(keys string) string {
	return "listen: 127.0.0.1:8080\ngroups:\n  - name: web\n    min_size: 1\n    max_size: 4\n    template: {command: [app]}\n" + keys
}

func TestRecyclingKeys(t *testing.T) {
	cfg, err := Parse("shoal.yaml", []byte(recycleDoc(`    max_lifetime: 24h
    update: {mode: proactive}
    disruption:
      max_unavailable: "25%"
      windows: ["Mon-Fri 02:00-05:00 Asia/Tokyo", "Sat 22:00-02:00"]
`)))
	if err != nil {
		t.Fatal(err)
	}
	g := cfg.Groups[0]
	if g.MaxLifetime != 24*time.Hour || g.Update.Mode != UpdateProactive {
		t.Errorf("max_lifetime %s, update.mode %q", g.MaxLifetime, g.Update.Mode)
	}
	b := g.Disruption.Budget
	if b.Percent != 25 || len(b.Windows) != 2 || b.Windows[1].Text != "Sat 22:00-02:00" || b.Max(4) != 1 || b.Max(8) != 2 {
		t.Errorf("budget %+v", b)
	}

	cfg, err = Parse("shoal.yaml", []byte(recycleDoc("    disruption: {max_unavailable: 2}\n")))
	if err != nil {
		t.Fatal(err)
	}
	if g := cfg.Groups[0]; g.Disruption.Budget.MaxUnavailable != 2 || g.MaxLifetime != 0 || g.Update.Mode != UpdateOpportunistic {
		t.Errorf("count: %+v", g)
	}
}

func TestRecyclingErrors(t *testing.T) {
	cases := []struct{ keys, want string }{
		{"    max_lifetime: 30s\n", `shoal.yaml:7:19: groups[0].max_lifetime: must be 0 (instances live as long as they serve) or from 1m0s to 8760h0m0s, got 30s`},
		{"    update: {mode: eager}\n", `shoal.yaml:7:20: groups[0].update.mode: must be one of opportunistic, proactive`},
		{"    update: {when: now}\n", `shoal.yaml:7:14: groups[0].update.when: unknown field; allowed: mode`},
		{"    disruption: {max_unavailable: 0}\n", `shoal.yaml:7:35: groups[0].disruption.max_unavailable: must be a count of at least 1 or a percentage such as "10%", got "0"`},
		{"    disruption: {max_unavailable: 150%}\n", `shoal.yaml:7:35: groups[0].disruption.max_unavailable: a percentage must be from 1% to 100%, got "150%"`},
		{"    disruption:\n      windows:\n        - Mon-Fri 02:00-05:00 UTC\n        - Mon-Fry 02:00-05:00 Asia/Tokyo\n", `shoal.yaml:10:11: groups[0].disruption.windows[1]: unknown day "Fry"`},
		{"    disruption: {windows: [\"02:00-05:00 Mars/Base\"]}\n", `shoal.yaml:7:28: groups[0].disruption.windows[0]: unknown time zone "Mars/Base"`},
		{"    disruption: {windows: \"02:00-05:00\"}\n", `shoal.yaml:7:27: groups[0].disruption.windows: must be a list of strings`},
	}
	for _, c := range cases {
		_, err := Parse("shoal.yaml", []byte(recycleDoc(c.keys)))
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%q:\n got: %v\nwant: %s...", c.keys, err, c.want)
		}
	}
}
