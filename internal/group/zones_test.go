package group

import (
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/provider"
)

// TestByZone: a scale-in takes from the zone with the most of the group
// first, keeping the policy's order within a zone and for ties; an
// instance still starting goes first and counts off its zone.
func TestByZone(t *testing.T) {
	zoneOf := map[string]string{}
	inst := func(name, zone string, st State) *instance {
		zoneOf[name] = zone
		return &instance{name: name, state: st, rec: provider.Record{ID: name}}
	}
	zone := func(in *instance) string { return zoneOf[in.name] }
	names := func(ps []pick) string {
		var out []string
		for _, p := range ps {
			out = append(out, p.in.name)
		}
		return strings.Join(out, " ")
	}
	// Policy order (newest first): 6 5 4 3 2 1; zones a: 1 2 3 4, b: 5, c: 6.
	picks := []pick{
		{in: inst("web-006", "c", InService)}, {in: inst("web-005", "b", InService)},
		{in: inst("web-004", "a", InService)}, {in: inst("web-003", "a", InService)},
		{in: inst("web-002", "a", InService)}, {in: inst("web-001", "a", InService)},
	}
	got := byZone(picks, zone)
	// a has 4, b and c 1: a's 004, 003, 002 (a has the most until it is
	// down to 1), then the three at 1 in the policy's order: 006, 005, 001.
	if want := "web-004 web-003 web-002 web-006 web-005 web-001"; names(got) != want {
		t.Errorf("order %s, want %s", names(got), want)
	}
	if !strings.HasPrefix(got[0].why, "zone a has the most of the group (4); ") {
		t.Errorf("reason %q", got[0].why)
	}
	// A starting instance in b goes first and counts off b.
	picks = []pick{
		{in: inst("web-009", "b", Starting)}, {in: inst("web-008", "b", InService)},
		{in: inst("web-007", "a", InService)}, {in: inst("web-006", "b", InService)}, {in: inst("web-005", "a", InService)},
	}
	// b: 3 (009 leaves first: 2), a: 2 -> tie: the order given (008 b), then a 2 > b 1: 007, then tie: 006, 005.
	if want := "web-009 web-008 web-007 web-006 web-005"; names(byZone(picks, zone)) != want {
		t.Errorf("with a starting one: %s, want %s", names(byZone(picks, zone)), want)
	}
	// One zone or none: unchanged.
	one := []pick{{in: inst("x-2", "", InService)}, {in: inst("x-1", "", InService)}}
	if names(byZone(one, zone)) != "x-2 x-1" {
		t.Errorf("without zones: %s", names(byZone(one, zone)))
	}
}

// TestDueInterrupted: an instance the cloud interrupts is due before any
// other, without max_lifetime or proactive updates, and outside the
// disruption budget (involuntary).
func TestDueInterrupted(t *testing.T) {
	now := time.Date(2026, 12, 6, 14, 0, 0, 0, time.UTC)
	cands := []recycleCandidate{
		{name: "web-001", started: now.Add(-48 * time.Hour)},
		{name: "web-002", started: now.Add(-time.Hour), interrupted: "spot interruption notice"},
	}
	due := dueInstances(now, cands, 24*time.Hour, false)
	if len(due) != 2 || due[0].name != "web-002" || !due[0].involuntary || due[0].why != "interrupted: spot interruption notice" || due[1].involuntary {
		t.Errorf("due %+v; want web-002 first, involuntary, then web-001 by lifetime", due)
	}
	if due := dueInstances(now, cands, 0, false); len(due) != 1 || due[0].name != "web-002" {
		t.Errorf("without max_lifetime: due %+v, want the interrupted one only", due)
	}
}
