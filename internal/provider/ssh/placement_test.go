package ssh

import (
	"fmt"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/provider"
)

// placeOn builds a Provider over hosts without connecting: a host is up
// when its client is set (placement never uses it).
func placeOn(hosts ...*host) *Provider {
	p := &Provider{hosts: make(map[string]*host)}
	for _, h := range hosts {
		p.hosts[h.name] = h
	}
	return p
}

// fakeHost is an up host running, per group, that many one-core instances.
func fakeHost(name string, capInst int, capCores float64, running map[string]int) *host {
	h := newHost(name, Host{Address: name, Capacity: Capacity{Instances: capInst, Cores: capCores}}, nil)
	h.client = &gossh.Client{}
	for group, n := range running {
		for i := range n {
			h.pending[fmt.Sprintf("%s-%03d", group, 900+i)] = pendingStart{group: group, cpus: 1}
		}
	}
	return h
}

func TestPlaceCoresAndRefusals(t *testing.T) {
	tmpl := config.Template{CPUs: 2}
	a := fakeHost("a", 0, 4, map[string]int{"web": 2}) // 2/4 cores: 2 more fit
	b := fakeHost("b", 0, 8, map[string]int{"web": 2}) // 2/8 cores
	c := fakeHost("c", 0, 4, map[string]int{"db": 3})  // 3/4: 2 more do not fit
	down := fakeHost("d", 0, 0, nil)
	down.client, down.down = nil, true
	held := fakeHost("e", 0, 0, nil)
	held.heldOffUntil = time.Now().Add(time.Minute)
	gone := fakeHost("f", 0, 0, nil)
	gone.removed = true
	p := placeOn(a, b, c, down, held, gone)

	// spread: a and b have 2 of web's each, c none but is full; then the
	// lower used fraction: b.
	h, why, err := p.place(provider.Spec{Group: "web", Name: "web-001", Template: tmpl})
	if err != nil || h != b || why != "spread: 2 of web's instances on b, fewest; 2 instances, 2/8 cores" {
		t.Errorf("spread: %v %q %v", h, why, err)
	}
	// pack: a (2/4 cores) and b (4/8) are as used: b has more instances.
	h, why, err = p.place(provider.Spec{Group: "batch", Name: "batch-001", Template: tmpl, Placement: config.Placement{Strategy: config.PlacePack}})
	if err != nil || h != b || !strings.HasPrefix(why, "pack: b most used that fits") {
		t.Errorf("pack: %v %q %v", h, why, err)
	}
	// Now a 2/4, b 6/8: b fits 2 more and is the most used.
	h, _, err = p.place(provider.Spec{Group: "batch", Name: "batch-002", Template: tmpl, Placement: config.Placement{Strategy: config.PlacePack}})
	if err != nil || h != b {
		t.Errorf("pack: %v %v", h, err)
	}
	// b 8/8, a 2/4: a takes one more, then nothing fits.
	if h, _, err = p.place(provider.Spec{Group: "web", Name: "web-002", Template: tmpl}); h != a {
		t.Errorf("last fit: %v %v", h, err)
	}
	_, _, err = p.place(provider.Spec{Group: "web", Name: "web-003", Template: tmpl})
	want := "no host can take it: a: capacity 4/4 cores, 2 more wanted; b: capacity 8/8 cores, 2 more wanted; c: capacity 3/4 cores, 2 more wanted; d: down; e: held off until "
	if err == nil || !strings.HasPrefix(err.Error(), want) || !strings.HasSuffix(err.Error(), "(went down recently); f: removed from the config") {
		t.Errorf("full: %v\nwant %s…", err, want)
	}
}

func TestHoldOff(t *testing.T) {
	for downs, want := range map[int]time.Duration{1: 30 * time.Second, 2: time.Minute, 3: 2 * time.Minute, 5: 8 * time.Minute, 6: 10 * time.Minute, 100: 10 * time.Minute} {
		if got := holdOff(downs); got != want {
			t.Errorf("holdOff(%d) = %s, want %s", downs, got, want)
		}
	}
}

func TestPlaceSkipsCordoned(t *testing.T) {
	a := fakeHost("a", 0, 0, nil)
	b := fakeHost("b", 0, 0, map[string]int{"web": 3})
	p := placeOn(a, b)
	cordoned := map[string]bool{"a": true}
	p.opts.Cordoned = func(host string) bool { return cordoned[host] }

	// spread would pick a (none of web's there); it is cordoned.
	h, _, err := p.place(provider.Spec{Group: "web", Name: "web-001"})
	if err != nil || h != b {
		t.Errorf("a cordoned: placed on %v, %v; want b", h, err)
	}
	cordoned["b"] = true
	_, _, err = p.place(provider.Spec{Group: "web", Name: "web-002"})
	want := "no host can take it: a: cordoned (`shoal hosts uncordon a` takes new instances there again); b: cordoned (`shoal hosts uncordon b` takes new instances there again)"
	if err == nil || err.Error() != want {
		t.Errorf("all cordoned: %v\nwant %s", err, want)
	}
	for _, st := range p.Hosts() {
		if !st.Cordoned {
			t.Errorf("host %s not shown cordoned", st.Name)
		}
	}
	cordoned["a"] = false
	if h, _, err := p.place(provider.Spec{Group: "web", Name: "web-003"}); err != nil || h != a {
		t.Errorf("a uncordoned: placed on %v, %v; want a", h, err)
	}
}
