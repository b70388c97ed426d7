package keepalived

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
)

// addrs lists the addresses on the VIP's interface in the VIP's family, as
// `ip -o addr show` prints them (10.0.0.100/24). A missing interface is an
// error that names it.
func (s *Supervisor) addrs(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	family := "-4"
	if s.vip.Addr().Is6() {
		family = "-6"
	}
	dev := s.o.VIP.Interface
	out, err := s.command(ctx, "ip", "-o", family, "addr", "show", "dev", dev).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("vip interface %s: %w: %s", dev, err, strings.TrimSpace(string(out)))
	}
	var list []string
	for _, line := range strings.Split(string(out), "\n") {
		// "3: eth0    inet 10.0.0.100/24 scope global secondary eth0 ..."
		if f := strings.Fields(line); len(f) >= 4 && (f[2] == "inet" || f[2] == "inet6") {
			list = append(list, f[3])
		}
	}
	return list, nil
}

// clearVIP removes the VIP from its interface if it is there: left by a
// keepalived killed with SIGKILL, it would make two nodes answer for it.
func (s *Supervisor) clearVIP(ctx context.Context) error {
	list, err := s.addrs(ctx)
	if err != nil {
		return err
	}
	for _, a := range list {
		p, err := netip.ParsePrefix(a)
		if err != nil || p.Addr() != s.vip.Addr() {
			continue
		}
		dctx, cancel := context.WithTimeout(ctx, cmdTimeout)
		out, err := s.command(dctx, "ip", "addr", "del", a, "dev", s.o.VIP.Interface).CombinedOutput()
		cancel()
		if err != nil {
			return fmt.Errorf("remove stale VIP %s from %s: %w: %s", a, s.o.VIP.Interface, err, strings.TrimSpace(string(out)))
		}
		s.log.Warn("removed a stale VIP that no keepalived holds", "vip", a, "interface", s.o.VIP.Interface)
	}
	return nil
}
