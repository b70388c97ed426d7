package consolidate

import (
	"reflect"
	"strings"
	"testing"
)

// host builds a host with capacity instances (0: unbounded) and n
// instances of group g named prefix-1…n, each of 1 core.
func host(name string, capacity int, g string, n int) Host {
	h := Host{Name: name, CapInstances: capacity}
	for i := 1; i <= n; i++ {
		h.Instances = append(h.Instances, Instance{Name: name + "-" + string(rune('0'+i)), Group: g, CPUs: 1})
	}
	return h
}

var web = map[string]Group{"web": {MaxMoves: 2}}

func moves(p *Plan) map[string]string {
	out := map[string]string{}
	for _, m := range p.Moves {
		out[m.Instance.Name] = m.To
	}
	return out
}

func TestDecideEmptiesTheLeastUsedHost(t *testing.T) {
	d := Decide([]Host{host("a", 4, "web", 3), host("b", 4, "web", 1)}, web)
	if d.Plan == nil {
		t.Fatalf("no plan: %+v", d.Skipped)
	}
	if d.Plan.Host != "b" || !reflect.DeepEqual(moves(d.Plan), map[string]string{"b-1": "a"}) {
		t.Fatalf("plan %+v", d.Plan)
	}
	// a cannot go to b: 3 moves > max_moves 2; said so.
	if len(d.Skipped) != 1 || d.Skipped[0].Host != "a" || !strings.Contains(d.Skipped[0].Reason, "3 moves of group web, more than its max_moves 2") {
		t.Fatalf("skipped %+v", d.Skipped)
	}
}

func TestDecideFewestMovesFirst(t *testing.T) {
	// b and c can both be emptied onto a; c takes fewer moves.
	d := Decide([]Host{host("a", 10, "web", 2), host("b", 10, "web", 2), host("c", 10, "web", 1)}, web)
	if d.Plan == nil || d.Plan.Host != "c" {
		t.Fatalf("plan %+v skipped %+v", d.Plan, d.Skipped)
	}
	// A tie in moves: the least used (by its own capacity) first.
	d = Decide([]Host{host("a", 2, "web", 1), host("b", 10, "web", 1), host("c", 10, "web", 3)}, web)
	if d.Plan == nil || d.Plan.Host != "b" {
		t.Fatalf("plan %+v", d.Plan)
	}
}

func TestDecidePacksOntoTheMostUsed(t *testing.T) {
	// b and c tie (2/4, 2 moves each): b by name. Its two go to the most
	// used host that fits: a (3/4) takes one, then it is full and c (2/4)
	// takes the other.
	d := Decide([]Host{host("a", 4, "web", 3), host("b", 4, "web", 2), host("c", 4, "web", 2)}, web)
	if d.Plan == nil {
		t.Fatalf("no plan: %+v", d.Skipped)
	}
	got := map[string]int{}
	for _, m := range d.Plan.Moves {
		got[m.To]++
	}
	if d.Plan.Host != "b" || got["a"] != 1 || got["c"] != 1 {
		t.Fatalf("plan %+v", d.Plan)
	}
}

func TestDecideNeverBreaksCapacity(t *testing.T) {
	// a is full, b's one instance has nowhere to go.
	d := Decide([]Host{host("a", 3, "web", 3), host("b", 3, "web", 1)}, web)
	if d.Plan != nil {
		t.Fatalf("planned %+v over full capacity", d.Plan)
	}
	if !strings.Contains(reason(d, "b"), "no room for b-1 (group web) on the other hosts in use: a 3/3 instances") {
		t.Fatalf("skipped %+v", d.Skipped)
	}
	// Cores: a has 1 core left, b's instance wants 2.
	a, b := host("a", 0, "web", 2), host("b", 0, "web", 1)
	a.CapCores, b.CapCores = 3, 3
	b.Instances[0].CPUs = 2
	if d := Decide([]Host{a, b}, web); d.Plan != nil || !strings.Contains(reason(d, "b"), "a 2/3 cores") {
		t.Fatalf("cores: plan %+v skipped %+v", d.Plan, d.Skipped)
	}
	// Two moves that fit one at a time but not together.
	a, c := host("a", 3, "web", 2), host("c", 3, "web", 2)
	if d := Decide([]Host{a, c}, web); d.Plan != nil {
		t.Fatalf("planned %+v: 2 moves onto 1 free place", d.Plan)
	}
}

func TestDecideLargestFirst(t *testing.T) {
	// b holds a 1-core and a 2-core instance. c (8/10 cores) is the most
	// used with 2 free, a (3/4) has 1 free: the 2-core one must go first,
	// to c, then the 1-core one to a. Smallest first would put the 1-core
	// one on c and leave the 2-core one nowhere.
	a, b, c := host("a", 0, "web", 2), host("b", 0, "web", 2), host("c", 0, "web", 4)
	a.CapCores, b.CapCores, c.CapCores = 4, 4, 10
	a.Instances[0].CPUs, a.Instances[1].CPUs = 1.5, 1.5
	b.Instances[1].CPUs = 2
	for i := range c.Instances {
		c.Instances[i].CPUs = 2
	}
	d := Decide([]Host{a, b, c}, web)
	if d.Plan == nil || d.Plan.Host != "b" {
		t.Fatalf("plan %+v skipped %+v", d.Plan, d.Skipped)
	}
	if got := moves(d.Plan); got["b-2"] != "c" || got["b-1"] != "a" {
		t.Fatalf("moves %v", got)
	}
	if d.Plan.Moves[0].Instance.Name != "b-2" {
		t.Fatalf("the largest is not moved first: %+v", d.Plan.Moves)
	}
}

func TestDecidePinnedStay(t *testing.T) {
	b := host("b", 4, "web", 1)
	b.Instances[0].Pinned = "protected"
	d := Decide([]Host{host("a", 4, "web", 3), b}, web)
	if d.Plan != nil {
		t.Fatalf("moved a protected instance: %+v", d.Plan)
	}
	if reason(d, "b") != "b-1 may not move: protected" {
		t.Fatalf("skipped %+v", d.Skipped)
	}
	// An instance of a group that does not consolidate pins its host.
	b = host("b", 4, "db", 1)
	if d := Decide([]Host{host("a", 4, "web", 3), b}, web); d.Plan != nil || !strings.Contains(reason(d, "b"), "group db does not consolidate") {
		t.Fatalf("plan %+v skipped %+v", d.Plan, d.Skipped)
	}
}

func TestDecideMaxMovesPerGroup(t *testing.T) {
	b := host("b", 10, "web", 2)
	b.Instances = append(b.Instances, Instance{Name: "api-1", Group: "api", CPUs: 1})
	groups := map[string]Group{"web": {MaxMoves: 2}, "api": {MaxMoves: 1}}
	d := Decide([]Host{host("a", 10, "web", 5), b}, groups)
	if d.Plan == nil || d.Plan.Host != "b" || len(d.Plan.Moves) != 3 {
		t.Fatalf("plan %+v skipped %+v", d.Plan, d.Skipped)
	}
	groups["web"] = Group{MaxMoves: 1}
	if d := Decide([]Host{host("a", 10, "web", 5), b}, groups); d.Plan != nil || !strings.Contains(reason(d, "b"), "2 moves of group web, more than its max_moves 1") {
		t.Fatalf("plan %+v skipped %+v", d.Plan, d.Skipped)
	}
}

func TestDecideDestinations(t *testing.T) {
	// An empty host is no destination: emptying b onto c frees nothing.
	d := Decide([]Host{host("b", 4, "web", 1), host("c", 4, "web", 0)}, web)
	if d.Plan != nil || !strings.Contains(reason(d, "b"), "no other host in use") {
		t.Fatalf("plan %+v skipped %+v", d.Plan, d.Skipped)
	}
	// A closed host is neither emptied nor a destination.
	a := host("a", 4, "web", 2)
	a.Closed = "cordoned"
	d = Decide([]Host{a, host("b", 4, "web", 1)}, web)
	if d.Plan != nil || reason(d, "a") != "host is cordoned" || !strings.Contains(reason(d, "b"), "no other host in use") {
		t.Fatalf("plan %+v skipped %+v", d.Plan, d.Skipped)
	}
	// Labels: only a host carrying the group's labels takes its instances.
	a, c := host("a", 10, "web", 3), host("c", 10, "web", 2)
	a.Labels = map[string]string{"zone": "x"}
	c.Labels = map[string]string{"zone": "y"}
	b := host("b", 10, "web", 1)
	d = Decide([]Host{a, b, c}, map[string]Group{"web": {MaxMoves: 2, Labels: map[string]string{"zone": "y"}}})
	if d.Plan == nil || d.Plan.Host != "b" || moves(d.Plan)["b-1"] != "c" {
		t.Fatalf("plan %+v skipped %+v", d.Plan, d.Skipped)
	}
	d = Decide([]Host{a, b}, map[string]Group{"web": {MaxMoves: 5, Labels: map[string]string{"zone": "y"}}})
	if d.Plan != nil || !strings.Contains(reason(d, "b"), "carries group web's placement labels") {
		t.Fatalf("plan %+v skipped %+v", d.Plan, d.Skipped)
	}
}

func TestDecideNothingToDo(t *testing.T) {
	if d := Decide(nil, web); d.Plan != nil || len(d.Skipped) != 0 {
		t.Fatalf("%+v", d)
	}
	// One host in use: nowhere to go.
	d := Decide([]Host{host("a", 4, "web", 2), host("b", 4, "web", 0)}, web)
	if d.Plan != nil || len(d.Skipped) != 1 {
		t.Fatalf("%+v", d)
	}
}

func reason(d Decision, host string) string {
	for _, s := range d.Skipped {
		if s.Host == host {
			return s.Reason
		}
	}
	return ""
}
