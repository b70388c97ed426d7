package testhost

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// A segment is a LAN of namespaces: a Linux bridge inside a switch
// namespace the lab makes, and each namespace on it by a veth whose far
// end is a port of that bridge. Nothing of the root namespace is on it, so
// its /24 cannot clash with this machine's networks and whatever runs
// there reaches only the segment (and its own loopback). The bridge floods
// link-local multicast (VRRP's 224.0.0.18), as a switch does.
//
//	        switch namespace: br0 (no address)
//	   ┌──────────┬──────────┬──────────┬──────────┐
//	 etcd      node-a     node-b     client     host0 …   each: eth0 on 10.99.N.0/24
//
// Spaces get .10, .11, … in the order asked; SSH hosts .50, .51, …

// segmentSeq tells apart the segments one process makes.
var segmentSeq atomic.Int32

// SegmentOptions says what a segment holds.
type SegmentOptions struct {
	// Spaces are plain namespaces (no sshd), e.g. "etcd", "node-a".
	Spaces []string
	// Hosts is the number of SSH hosts, as New makes them.
	Hosts int
}

// NewSegment makes a segment under dir (which must exist): a switch
// namespace, o.Spaces and o.Hosts SSH hosts on 10.99.N.0/24, where N comes
// from the pid (segments are isolated from each other and from the root
// namespace, so N only makes addresses easy to tell apart in logs).
func NewSegment(ctx context.Context, dir string, o SegmentOptions) (*Lab, error) {
	if err := supported(); err != nil {
		return nil, err
	}
	sweep(ctx)
	l, err := newLab(ctx, dir)
	if err != nil {
		return nil, err
	}
	seq := segmentSeq.Add(1)
	pid := os.Getpid()
	net24 := fmt.Sprintf("10.99.%d", 1+(pid+int(seq))%250)
	l.Switch = fmt.Sprintf("%s%d-s%d-switch", prefix, pid, seq)
	l.Spaces = map[string]*Host{}
	fail := func(err error) (*Lab, error) {
		l.Close()
		return nil, err
	}
	if err := run(ctx, "ip", "netns", "add", l.Switch); err != nil {
		return fail(err)
	}
	// No multicast snooping: VRRP adverts must reach every port whatever
	// IGMP the namespaces send.
	if err := run(ctx, "ip", "netns", "exec", l.Switch, "ip", "link", "add", "br0", "type", "bridge", "mcast_snooping", "0"); err != nil {
		return fail(err)
	}
	if err := run(ctx, "ip", "netns", "exec", l.Switch, "ip", "link", "set", "br0", "up"); err != nil {
		return fail(err)
	}
	port := 0
	attach := func(name, addr string) (*Host, error) {
		h := &Host{
			Name:   fmt.Sprintf("%s%d-s%d-%s", prefix, pid, seq, name),
			Addr:   addr,
			Iface:  "eth0",
			veth:   fmt.Sprintf("%s%dw%d-%d", prefix, pid%100000, seq%10, port),
			linkNS: l.Switch,
			dir:    filepath.Join(dir, name),
		}
		port++
		// Made in the root namespace under two unique names, then moved:
		// the host's end is renamed eth0 in its own namespace.
		tmp := h.veth + "i"
		steps := [][]string{
			{"ip", "netns", "add", h.Name},
			{"ip", "link", "add", h.veth, "type", "veth", "peer", "name", tmp},
			{"ip", "link", "set", h.veth, "netns", l.Switch},
			{"ip", "link", "set", tmp, "netns", h.Name},
			{"ip", "netns", "exec", l.Switch, "ip", "link", "set", h.veth, "master", "br0"},
			{"ip", "netns", "exec", l.Switch, "ip", "link", "set", h.veth, "up"},
			{"ip", "netns", "exec", h.Name, "ip", "link", "set", tmp, "name", h.Iface},
			{"ip", "netns", "exec", h.Name, "ip", "addr", "add", addr + "/24", "dev", h.Iface},
			{"ip", "netns", "exec", h.Name, "ip", "link", "set", h.Iface, "up"},
			{"ip", "netns", "exec", h.Name, "ip", "link", "set", "lo", "up"},
		}
		for _, s := range steps {
			if err := run(ctx, s...); err != nil {
				return h, err
			}
		}
		return h, nil
	}
	for i, name := range o.Spaces {
		if _, dup := l.Spaces[name]; dup || name == "" || name == "switch" {
			return fail(fmt.Errorf("test hosts: space name %q is empty, reserved or given twice", name))
		}
		h, err := attach(name, fmt.Sprintf("%s.%d", net24, 10+i))
		l.Spaces[name] = h
		if err != nil {
			return fail(err)
		}
	}
	for i := range o.Hosts {
		h, err := attach("host"+strconv.Itoa(i), fmt.Sprintf("%s.%d", net24, 50+i))
		l.Hosts = append(l.Hosts, h)
		if err != nil {
			return fail(err)
		}
		if err := l.configureSSHD(ctx, h); err != nil {
			return fail(err)
		}
	}
	if err := l.startHosts(ctx); err != nil {
		return fail(err)
	}
	return l, nil
}

// Space returns the segment's namespace called name; it panics on a name
// the segment was not made with (a test's own mistake).
func (l *Lab) Space(name string) *Host {
	h, ok := l.Spaces[name]
	if !ok {
		panic(fmt.Sprintf("testhost: the lab has no space %q", name))
	}
	return h
}

// IP returns the address .last on the segment's /24, e.g. for a VIP.
func (l *Lab) IP(last int) string {
	for _, h := range l.Spaces {
		ip := net.ParseIP(h.Addr).To4()
		return fmt.Sprintf("%d.%d.%d.%d", ip[0], ip[1], ip[2], last)
	}
	for _, h := range l.Hosts {
		ip := net.ParseIP(h.Addr).To4()
		return fmt.Sprintf("%d.%d.%d.%d", ip[0], ip[1], ip[2], last)
	}
	return ""
}

// Command returns a command that runs argv in h's namespace (ip netns
// exec, which execs it: its pid is the command's own).
func (h *Host) Command(ctx context.Context, argv ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", h.Name}, argv...)...)
}

// Do runs f on an OS thread inside h's namespace, so the sockets f makes
// (and the interfaces it looks up) are h's. No other goroutine ever runs
// on that thread: its goroutine returns still locked, so Go ends it.
func (h *Host) Do(f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		ns, err := os.Open(filepath.Join("/run/netns", h.Name))
		if err != nil {
			done <- fmt.Errorf("test host %s: %w", h.Name, err)
			return
		}
		defer ns.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- fmt.Errorf("test host %s: enter namespace: %w", h.Name, err)
			return
		}
		done <- f()
	}()
	return <-done
}

// Dial connects from inside h's namespace.
func (h *Host) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := h.Do(func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// HTTPClient returns a client whose connections start in h's namespace.
func (h *Host) HTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{Proxy: nil, DialContext: h.Dial, DisableKeepAlives: true}}
}

// CutFrom drops what h sends to addr, silently, as a partition does, and
// leaves the rest of h's traffic alone: h's neighbour entry for addr is
// pinned to a MAC address no one has. (No netfilter needed: the machines
// this runs on may have neither iptables nor nft.)
func (h *Host) CutFrom(ctx context.Context, addr string) error {
	return run(ctx, "ip", "netns", "exec", h.Name, "ip", "neigh", "replace", addr, "lladdr", "02:00:00:00:00:01", "dev", h.Iface, "nud", "permanent")
}

// RestoreTo undoes CutFrom.
func (h *Host) RestoreTo(ctx context.Context, addr string) error {
	return run(ctx, "ip", "netns", "exec", h.Name, "ip", "neigh", "del", addr, "dev", h.Iface)
}

// Etcd is Debian's etcd-server binary.
const Etcd = "/usr/bin/etcd"

// StartEtcd runs a single-member etcd in h's namespace, serving clients on
// h's address and its loopback (port 2379) with its data under the lab's
// directory, and waits until it is healthy. It returns the client URL. The
// process lives until h is killed or the lab closed.
func (l *Lab) StartEtcd(ctx context.Context, h *Host) (string, error) {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		if _, statErr := os.Stat(Etcd); statErr != nil {
			return "", fmt.Errorf("%w: etcd not found (apt-get install etcd-server)", ErrUnsupported)
		}
		bin = Etcd
	}
	dir := filepath.Join(l.Dir, h.Name+"-etcd")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("test etcd: %w", err)
	}
	url := "http://" + net.JoinHostPort(h.Addr, "2379")
	peer := "http://127.0.0.1:2380"
	logf, err := os.OpenFile(filepath.Join(dir, "etcd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return "", fmt.Errorf("test etcd: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command("ip", "netns", "exec", h.Name, bin, "--name", "lab", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", url+",http://127.0.0.1:2379", "--advertise-client-urls", url,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "lab="+peer)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("test etcd: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }() // reaps it when the lab kills it
	c := h.HTTPClient()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := etcdHealthy(ctx, c, url)
		if err == nil {
			return url, nil
		}
		select {
		case <-exited:
			return "", fmt.Errorf("test etcd in %s exited: %s (see %s)", h.Name, cmd.ProcessState, logf.Name())
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return "", fmt.Errorf("test etcd in %s: not healthy at %s: %w (see %s)", h.Name, url, err, logf.Name())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// etcdHealthy asks etcd's /health endpoint.
func etcdHealthy(ctx context.Context, c *http.Client, url string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var h struct {
		Health string `json:"health"`
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err := json.Unmarshal(body, &h); err != nil || h.Health != "true" {
		return fmt.Errorf("etcd /health answered %s: %s", resp.Status, body)
	}
	return nil
}
