package testhost

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/ipv4"
)

// TestSegment makes the HA pair's lab: etcd, two nodes, a client and two
// SSH hosts on one bridge. Every namespace reaches the others over TCP and
// its own loopback, and the root namespace has no address on it; a
// datagram to VRRP's multicast group crosses the bridge; etcd answers both
// nodes; a node logs in to a host with the lab's key and known_hosts; a
// cut link and a cut from one address drop only what they should and are
// undone; Kill and Close leave nothing behind.
func TestSegment(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l, err := NewSegment(ctx, t.TempDir(), SegmentOptions{Spaces: []string{"etcd", "node-a", "node-b", "client"}, Hosts: 2})
	if errors.Is(err, ErrUnsupported) {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	etcdNS, a, b, client := l.Space("etcd"), l.Space("node-a"), l.Space("node-b"), l.Space("client")
	url, err := l.StartEtcd(ctx, etcdNS)
	if errors.Is(err, ErrUnsupported) && os.Getenv("CI") == "" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if want := "http://" + etcdNS.Addr + ":2379"; url != want {
		t.Fatalf("etcd's URL is %s, want %s", url, want)
	}
	if vip := l.IP(100); !strings.HasSuffix(vip, ".100") || !strings.HasPrefix(vip, "10.99.") {
		t.Fatalf("IP(100) = %s", vip)
	}
	for _, h := range []*Host{a, b} {
		if err := etcdHealthy(ctx, h.HTTPClient(), url); err != nil {
			t.Fatalf("etcd from %s: %v", h.Name, err)
		}
	}
	dial := func(from *Host, addr string) error {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		c, err := from.Dial(ctx, "tcp", addr)
		if err == nil {
			c.Close()
		}
		return err
	}
	// TCP across the bridge, and each namespace's own loopback.
	for _, from := range []*Host{a, b, client} {
		for _, h := range l.Hosts {
			if err := dial(from, net.JoinHostPort(h.Addr, "22")); err != nil {
				t.Fatalf("%s → sshd on %s: %v", from.Name, h.Addr, err)
			}
		}
	}
	if err := dial(etcdNS, "127.0.0.1:2379"); err != nil {
		t.Fatalf("etcd on its own loopback: %v", err)
	}
	if err := dial(a, "127.0.0.1:2379"); err == nil {
		t.Fatal("node-a's loopback reaches etcd's: the namespaces share a loopback")
	}
	// Nothing of the root namespace is on the segment. (Not checked by
	// dialing: from here that would go out by the default route.)
	seg := strings.TrimSuffix(l.IP(0), ".0") + "."
	if addrs, err := net.InterfaceAddrs(); err != nil {
		t.Fatal(err)
	} else {
		for _, ad := range addrs {
			if strings.HasPrefix(ad.String(), seg) {
				t.Fatalf("the root namespace has %s on the segment", ad)
			}
		}
	}
	for _, h := range l.Spaces {
		if h.Iface != "eth0" {
			t.Fatalf("%s's interface is %q, want eth0", h.Name, h.Iface)
		}
	}

	// VRRP's group (224.0.0.18) crosses the bridge: what node-a sends
	// there, node-b hears.
	group := &net.UDPAddr{IP: net.IPv4(224, 0, 0, 18), Port: 5405}
	var listener *net.UDPConn
	if err := b.Do(func() error {
		ifi, err := net.InterfaceByName(b.Iface)
		if err != nil {
			return err
		}
		listener, err = net.ListenMulticastUDP("udp4", ifi, group)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	if err := a.Do(func() error {
		ifi, err := net.InterfaceByName(a.Iface)
		if err != nil {
			return err
		}
		c, err := net.ListenPacket("udp4", "0.0.0.0:0")
		if err != nil {
			return err
		}
		defer c.Close()
		pc := ipv4.NewPacketConn(c)
		if err := pc.SetMulticastInterface(ifi); err != nil {
			return err
		}
		_, err = pc.WriteTo([]byte("advert"), nil, group)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	_ = listener.SetReadDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 64)
	n, from, err := listener.ReadFromUDP(buf)
	if err != nil || string(buf[:n]) != "advert" || from.IP.String() != a.Addr {
		t.Fatalf("multicast from node-a to node-b: %q from %v, %v", buf[:n], from, err)
	}

	// A node logs in to a host as shoal's ssh provider will.
	out, err := a.Command(ctx, "ssh", "-i", l.KeyFile, "-o", "UserKnownHostsFile="+l.KnownHosts,
		"-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", l.User+"@"+l.Hosts[1].Addr, "ip -o -4 addr show dev eth0").CombinedOutput()
	if err != nil || !strings.Contains(string(out), l.Hosts[1].Addr+"/24") {
		t.Fatalf("ssh from node-a to %s: %v: %s", l.Hosts[1].Addr, err, out)
	}

	// A cut link drops everything to and from the namespace, until restored.
	if err := l.Hosts[0].LinkDown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := dial(client, net.JoinHostPort(l.Hosts[0].Addr, "22")); err == nil {
		t.Fatal("a host whose link is down still answers")
	}
	if err := l.Hosts[0].LinkUp(ctx); err != nil {
		t.Fatal(err)
	}
	if err := dial(client, net.JoinHostPort(l.Hosts[0].Addr, "22")); err != nil {
		t.Fatalf("after LinkUp: %v", err)
	}

	// node-a cut from etcd: only that pair stops talking.
	if err := a.CutFrom(ctx, etcdNS.Addr); err != nil {
		t.Fatal(err)
	}
	if err := etcdHealthy(ctx, a.HTTPClient(), url); err == nil {
		t.Fatal("node-a reaches etcd after CutFrom")
	}
	if err := etcdHealthy(ctx, b.HTTPClient(), url); err != nil {
		t.Fatalf("node-b lost etcd when node-a was cut from it: %v", err)
	}
	if err := dial(a, net.JoinHostPort(l.Hosts[0].Addr, "22")); err != nil {
		t.Fatalf("node-a cut from etcd lost a host too: %v", err)
	}
	if err := a.RestoreTo(ctx, etcdNS.Addr); err != nil {
		t.Fatal(err)
	}
	if err := etcdHealthy(ctx, a.HTTPClient(), url); err != nil {
		t.Fatalf("node-a after RestoreTo: %v", err)
	}

	// Kill empties a namespace; Close removes them all.
	pids, err := etcdNS.PIDs(ctx)
	if err != nil || len(pids) == 0 {
		t.Fatalf("etcd's namespace runs %v (%v), want etcd", pids, err)
	}
	if err := etcdNS.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if pids, _ := etcdNS.PIDs(ctx); len(pids) != 0 {
		t.Fatalf("after Kill %s still runs %v", etcdNS.Name, pids)
	}
	names := []string{l.Switch}
	for _, h := range slices.Concat(l.Hosts, []*Host{etcdNS, a, b, client}) {
		names = append(names, h.Name)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if err := exec.Command("ip", "netns", "pids", n).Run(); err == nil {
			t.Fatalf("namespace %s still there after Close", n)
		}
	}
}
