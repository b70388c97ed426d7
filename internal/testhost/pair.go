package testhost

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync/atomic"
	"time"
)

// Pair is two network namespaces joined by a veth pair: a LAN of two hosts
// that nothing else is on, not even the root namespace. VRRP between two
// keepalived daemons runs on it (multicast or unicast) as it would between
// two machines on a switch.
type Pair struct {
	// NS are the namespaces' names.
	NS [2]string
	// Iface is the name of the veth end in each namespace (the same in
	// both: names are per namespace).
	Iface string
	// Addr are the two ends' addresses on the /24 Subnet.X.0: .1 and .2.
	Addr   [2]string
	Subnet string
}

// pairs numbers this process's pairs, so that tests in parallel get
// different namespaces.
var pairs atomic.Int64

// NewPair makes two namespaces joined by a veth pair named iface in each,
// with addresses 10.98.X.1/24 and 10.98.X.2/24 and lo up. Names carry the
// package's prefix and this process's pid: a killed test's pair is swept by
// the next New or NewPair. Needs root and iproute2, else ErrUnsupported.
func NewPair(ctx context.Context, iface string) (*Pair, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: network namespaces need root", ErrUnsupported)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, fmt.Errorf("%w: ip not found (apt-get install iproute2)", ErrUnsupported)
	}
	sweep(ctx)
	n := pairs.Add(1)
	p := &Pair{Iface: iface, Subnet: fmt.Sprintf("10.98.%d", 1+(os.Getpid()+int(n))%250)}
	for i := range p.NS {
		p.NS[i] = fmt.Sprintf("%s%d-pair%d%c", prefix, os.Getpid(), n, 'a'+i)
		p.Addr[i] = fmt.Sprintf("%s.%d", p.Subnet, i+1)
	}
	steps := [][]string{
		{"ip", "netns", "add", p.NS[0]},
		{"ip", "netns", "add", p.NS[1]},
		{"ip", "-n", p.NS[0], "link", "add", iface, "type", "veth", "peer", "name", iface, "netns", p.NS[1]},
	}
	for i, ns := range p.NS {
		steps = append(steps,
			[]string{"ip", "-n", ns, "addr", "add", p.Addr[i] + "/24", "dev", iface},
			[]string{"ip", "-n", ns, "link", "set", iface, "up"},
			[]string{"ip", "-n", ns, "link", "set", "lo", "up"})
	}
	for _, s := range steps {
		if err := run(ctx, s...); err != nil {
			p.Close()
			return nil, err
		}
	}
	return p, nil
}

// Close kills everything running in both namespaces and removes them (and
// with them the veth pair). It is safe to call more than once.
func (p *Pair) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	for _, ns := range p.NS {
		if ns == "" {
			continue
		}
		if err := killAll(ctx, ns); err != nil {
			errs = append(errs, err)
		}
		if err := remove(ctx, ns); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
