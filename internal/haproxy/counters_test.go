package haproxy

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
)

var (
	// trackRule is a rule that takes a sticky counter.
	trackRule = regexp.MustCompile(`\btrack-sc(\d+)\b`)
	// counterUse is anything that reads or changes a sticky counter:
	// sc0_conn_cur, sc_http_req_rate(0), sc-inc-gpc0(0).
	counterUse = regexp.MustCompile(`\bsc(\d+)_[a-z_0-9]+|\bsc[_-][a-z_0-9-]+\((\d+)\)`)
	// routeTo is a frontend's choice of backend.
	routeTo = regexp.MustCompile(`^(?:use_backend|default_backend) ([A-Za-z0-9_.:-]+)`)
)

// sections splits a rendered haproxy.cfg into its sections' lines, keyed
// "frontend NAME", "backend NAME".
func sections(cfg string) map[string][]string {
	out := map[string][]string{}
	cur := ""
	for line := range strings.Lines(cfg) {
		line = strings.TrimRight(line, "\n")
		if line != "" && !strings.HasPrefix(line, " ") {
			cur = line
			continue
		}
		if l := strings.TrimSpace(line); l != "" && cur != "" {
			out[cur] = append(out[cur], l)
		}
	}
	return out
}

// counters returns the sticky counters a section's rules track and those
// its rules read or change.
func counters(t *testing.T, lines []string) (tracked, used []int) {
	t.Helper()
	num := func(s string) int {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, l := range lines {
		for _, m := range trackRule.FindAllStringSubmatch(l, -1) {
			tracked = append(tracked, num(m[1]))
		}
		for _, m := range counterUse.FindAllStringSubmatch(l, -1) {
			used = append(used, num(m[1]+m[2]))
		}
	}
	return tracked, used
}

// TestStickyCountersPerUser renders every combination of a frontend's rate
// limit (none, per address, per header), a group that holds requests
// (scale_to_zero) and sticky sessions, with the frontend named after the
// group or not, and checks on the rendered configuration that along every
// path a request takes (its frontend, then the backend it is routed to) no
// sticky counter is tracked twice, that each rule reads or changes only a
// counter its own section tracks (a counter another section tracked first
// reads that section's table), that only HAProxy 2.6's three counters are
// used, and that haproxy -c accepts the configuration without a warning.
// The hold and the rate limit both used sc0: the hold's track-sc0 was
// ignored and max_queue read the limit's table, which has no conn_cur.
func TestStickyCountersPerUser(t *testing.T) {
	limits := []struct {
		name string
		rl   *config.RateLimit
	}{
		{"no limit", nil},
		{"limit per address", &config.RateLimit{Requests: 100, Per: 10 * time.Second, By: "ip"}},
		{"limit per header", &config.RateLimit{Requests: 100, Per: 10 * time.Second, By: "header:X-Api-Key"}},
	}
	checked := 0
	for _, lim := range limits {
		for _, hold := range []bool{false, true} {
			for _, sticky := range []bool{false, true} {
				for _, feName := range []string{"edge", "web"} {
					name := fmt.Sprintf("%s, hold %v, sticky %v, frontend %s", lim.name, hold, sticky, feName)
					dir := t.TempDir()
					cfg := testConfig(dir, "127.0.0.1:8080")
					if hold {
						cfg.Groups[0].ScaleToZero = &config.ScaleToZero{IdleAfter: time.Minute, MaxQueue: 5}
					}
					if sticky {
						cfg.Groups[0].Sticky = &config.Sticky{Cookie: "SRV"}
					}
					// The other groups: one that holds with sticky sessions,
					// one with neither, whatever web has.
					cfg.Groups[1].ScaleToZero = &config.ScaleToZero{IdleAfter: time.Minute, MaxQueue: 5}
					cfg.Groups[1].Sticky = &config.Sticky{Cookie: "API"}
					cfg.Frontends[0].Name = feName
					cfg.Frontends[0].RateLimit = lim.rl
					p := PathsFor(dir)
					text, err := Render(cfg, p)
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					secs := sections(text)
					for sec, lines := range secs {
						if !strings.HasPrefix(sec, "frontend ") {
							continue
						}
						feTracked, feUsed := counters(t, lines)
						for _, l := range lines {
							m := routeTo.FindStringSubmatch(l)
							if m == nil || strings.Contains(m[1], "%[") {
								continue // the hand-off's backend comes from its header
							}
							beTracked, beUsed := counters(t, secs["backend "+m[1]])
							path := fmt.Sprintf("%s: %s → backend %s", name, sec, m[1])
							all := append(slices.Clone(feTracked), beTracked...)
							slices.Sort(all)
							if len(slices.Compact(slices.Clone(all))) != len(all) {
								t.Errorf("%s: sticky counters tracked %v: two users share one", path, all)
							}
							for _, n := range all {
								if n > 2 {
									t.Errorf("%s: sc%d, beyond HAProxy 2.6's sc0..sc2", path, n)
								}
							}
							for _, u := range feUsed {
								if !slices.Contains(feTracked, u) {
									t.Errorf("%s: the frontend uses sc%d, which it does not track", path, u)
								}
							}
							for _, u := range beUsed {
								if !slices.Contains(beTracked, u) {
									t.Errorf("%s: the backend uses sc%d, which it does not track (the frontend's table would be read)", path, u)
								}
							}
							checked++
						}
					}
					if err := os.MkdirAll(p.Dir, 0o700); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(p.Lua, HoldScript(), 0o600); err != nil {
						t.Fatal(err)
					}
					t.Run(strings.NewReplacer(" ", "_", ",", "").Replace(name), func(t *testing.T) {
						haproxyCheck(t, dir, text)
					})
				}
			}
		}
	}
	if checked < 24 {
		t.Fatalf("only %d frontend-to-backend paths checked", checked)
	}
}
