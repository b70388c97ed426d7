// Package testhost makes "other hosts" for tests and benchmarks: each host is
// a network namespace with its own address on a veth pair to the root
// namespace and a real OpenSSH daemon listening there. shoal and HAProxy stay
// in the root namespace and reach a host over its veth, as they would reach a
// server on a LAN. NewSegment instead puts namespaces (an HA pair's nodes,
// etcd, a client) and SSH hosts on one bridge of their own, apart from the
// root namespace (see segment.go).
//
// Namespaces isolate the network only: the hosts share this machine's file
// system and PID space, so what identifies a process as a host's is its
// network namespace (see Host.PIDs), never its pid.
//
// Creating namespaces needs root (CAP_NET_ADMIN) and iproute2; sshd comes from
// Debian's openssh-server. New returns ErrUnsupported, naming what is
// missing, where that cannot be had, so tests skip with that message.
package testhost

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// ErrUnsupported reports that this machine cannot make test hosts.
var ErrUnsupported = errors.New("test hosts unsupported here")

// SSHD is where Debian's openssh-server puts the daemon.
const SSHD = "/usr/sbin/sshd"

// prefix starts the name of every namespace and veth this package makes,
// followed by the pid of the process that made it, so that New can sweep
// what a killed test left behind.
const prefix = "shth"

// Lab is a set of hosts with one client key that every host accepts, and a
// known_hosts file that has every host's key.
type Lab struct {
	// Dir holds the keys, known_hosts and each host's sshd files.
	Dir string
	// KeyFile is the private key every host accepts for root; KnownHosts
	// lists every host's key by address.
	KeyFile    string
	KnownHosts string
	// User is the login on every host: the user running the test.
	User  string
	Hosts []*Host

	// A segment's lab (NewSegment) also has its switch namespace, which
	// holds the bridge, and the namespaces on the segment without sshd,
	// by the name they were asked for.
	Switch string
	Spaces map[string]*Host
}

// Host is one network namespace with an sshd.
type Host struct {
	// Name is the namespace's name; Addr is the host's address (its end of
	// the veth), Peer the root namespace's end ("" on a segment).
	Name string
	Addr string
	Peer string
	// Iface is the host's end of the veth, in its namespace.
	Iface string
	// veth is the other end of the pair, in linkNS ("": the root
	// namespace; a segment's switch namespace otherwise).
	veth   string
	linkNS string
	dir    string
	// subnet is the number of a New host's /30 (see subnet), held until
	// Close.
	subnet int

	mu   sync.Mutex
	sshd *exec.Cmd
}

// New makes n hosts under dir (which must exist). Each gets an address on a
// /30 of 10.0.0.0/8 whose other address is the root namespace's end.
func New(ctx context.Context, dir string, n int) (*Lab, error) {
	if err := supported(); err != nil {
		return nil, err
	}
	sweep(ctx)
	l, err := newLab(ctx, dir)
	if err != nil {
		return nil, err
	}
	for i := range n {
		// Numbered across the process, not the lab: tests that run side
		// by side each make a lab, and the names are the kernel's.
		seq := int(hostSeq.Add(1)) - 1
		k, a, b, c := subnet(seq)
		h := &Host{
			Name:   fmt.Sprintf("%s%d-%d", prefix, os.Getpid(), seq),
			Addr:   fmt.Sprintf("10.%d.%d.%d", a, b, c+2),
			Peer:   fmt.Sprintf("10.%d.%d.%d", a, b, c+1),
			veth:   fmt.Sprintf("%s%dv%d", prefix, os.Getpid()%100000, seq),
			Iface:  fmt.Sprintf("%s%dv%di", prefix, os.Getpid()%100000, seq),
			dir:    filepath.Join(l.Dir, "host"+strconv.Itoa(i)),
			subnet: k,
		}
		l.Hosts = append(l.Hosts, h)
		if err := l.add(ctx, h); err != nil {
			l.Close()
			return nil, err
		}
	}
	if err := l.startHosts(ctx); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// newLab makes the client key every host will accept.
func newLab(ctx context.Context, dir string) (*Lab, error) {
	l := &Lab{Dir: dir, KeyFile: filepath.Join(dir, "id_ed25519"), KnownHosts: filepath.Join(dir, "known_hosts"), User: "root"}
	if u := os.Getenv("USER"); u != "" && os.Getuid() != 0 {
		l.User = u
	}
	if err := run(ctx, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "shoal-test", "-f", l.KeyFile); err != nil {
		return nil, err
	}
	pub, err := os.ReadFile(l.KeyFile + ".pub")
	if err != nil {
		return nil, fmt.Errorf("test hosts: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "authorized_keys"), pub, 0o600); err != nil {
		return nil, fmt.Errorf("test hosts: %w", err)
	}
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil { // sshd's privilege separation directory
		return nil, fmt.Errorf("test hosts: %w", err)
	}
	return l, nil
}

// startHosts writes known_hosts with every host's key and starts their
// sshds.
func (l *Lab) startHosts(ctx context.Context) error {
	var known strings.Builder
	for _, h := range l.Hosts {
		key, err := os.ReadFile(filepath.Join(h.dir, "host_key.pub"))
		if err != nil {
			return fmt.Errorf("test hosts: %w", err)
		}
		f := strings.Fields(string(key))
		fmt.Fprintf(&known, "%s %s %s\n", h.Addr, f[0], f[1])
	}
	if err := os.WriteFile(l.KnownHosts, []byte(known.String()), 0o600); err != nil {
		return fmt.Errorf("test hosts: %w", err)
	}
	for _, h := range l.Hosts {
		if err := h.StartSSHD(ctx); err != nil {
			return err
		}
	}
	return nil
}

func supported() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: network namespaces need root", ErrUnsupported)
	}
	for _, bin := range []string{"ip", "ssh-keygen", SSHD} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%w: %s not found (apt-get install iproute2 openssh-server)", ErrUnsupported, bin)
		}
	}
	return nil
}

// hostSeq numbers the hosts New makes in this process: labs made at the
// same time (parallel tests) get namespaces, veths and /30s of their own.
var hostSeq atomic.Int32

// subnets are the /30s (by k, see subnet) that this process's hosts hold,
// so that two labs made at once cannot both pick one before either has
// added its address.
var subnets = struct {
	sync.Mutex
	held map[int]bool
}{held: map[int]bool{}}

// subnet picks the /30 of host seq, 10.A.B.C/30 (number k), from this
// process's pid and seq, moved on while it is held here or its address is
// already in use on this machine.
func subnet(seq int) (k, a, b, c int) {
	subnets.Lock()
	defer subnets.Unlock()
	for k = os.Getpid()*16 + seq%16; ; k += 16 {
		a, b, c = 20+(k/(256*64))%200, (k/64)%256, (k%64)*4
		if !subnets.held[k] && !inUse(fmt.Sprintf("10.%d.%d.%d", a, b, c+1)) {
			subnets.held[k] = true
			return k, a, b, c
		}
	}
}

func inUse(addr string) bool {
	ifs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range ifs {
		if strings.HasPrefix(a.String(), addr+"/") {
			return true
		}
	}
	return false
}

// add makes h's namespace on a /30 to the root namespace and its sshd's
// files.
func (l *Lab) add(ctx context.Context, h *Host) error {
	steps := [][]string{
		{"ip", "netns", "add", h.Name},
		{"ip", "link", "add", h.veth, "type", "veth", "peer", "name", h.Iface},
		{"ip", "link", "set", h.Iface, "netns", h.Name},
		{"ip", "addr", "add", h.Peer + "/30", "dev", h.veth},
		{"ip", "link", "set", h.veth, "up"},
		{"ip", "netns", "exec", h.Name, "ip", "addr", "add", h.Addr + "/30", "dev", h.Iface},
		{"ip", "netns", "exec", h.Name, "ip", "link", "set", h.Iface, "up"},
		{"ip", "netns", "exec", h.Name, "ip", "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := run(ctx, s...); err != nil {
			return err
		}
	}
	return l.configureSSHD(ctx, h)
}

// configureSSHD writes h's host key and sshd_config.
func (l *Lab) configureSSHD(ctx context.Context, h *Host) error {
	if err := os.MkdirAll(h.dir, 0o700); err != nil {
		return fmt.Errorf("test hosts: %w", err)
	}
	if err := run(ctx, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", h.Name, "-f", filepath.Join(h.dir, "host_key")); err != nil {
		return err
	}
	// SetEnv SHLVL=1: bash, the login shell here, reads ~/.bashrc for a
	// command run by sshd unless it is nested (SHLVL). This machine's
	// root .bashrc runs `pyenv init`: ~100 ms of CPU per session, and a
	// lock that a session killed mid-way (Host.Kill) leaves behind makes
	// every later login wait 60 s. The hosts' rc files are not what the
	// tests test.
	conf := fmt.Sprintf(`ListenAddress %s
Port 22
HostKey %s
AuthorizedKeysFile %s
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
StrictModes no
UsePAM no
PidFile %s
MaxSessions 100
MaxStartups 100
LogLevel VERBOSE
SetEnv SHLVL=1%s
`, h.Addr, filepath.Join(h.dir, "host_key"), filepath.Join(l.Dir, "authorized_keys"), filepath.Join(h.dir, "sshd.pid"), containersConf())
	if err := os.WriteFile(filepath.Join(h.dir, "sshd_config"), []byte(conf), 0o600); err != nil {
		return fmt.Errorf("test hosts: %w", err)
	}
	return nil
}

// containersConf passes this process's CONTAINERS_CONF (a machine's
// podman settings for tests, see package testcontainer) to the sessions,
// as more of SetEnv's words.
func containersConf() string {
	if c := os.Getenv("CONTAINERS_CONF"); c != "" && !strings.ContainsAny(c, " \t\n\"") {
		return " CONTAINERS_CONF=" + c
	}
	return ""
}

// StartSSHD starts the host's sshd (in the foreground of its own process
// group, logging to sshd.log in the host's directory) and waits until it
// accepts connections.
func (h *Host) StartSSHD(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sshd != nil {
		return nil
	}
	cmd := exec.Command("ip", "netns", "exec", h.Name, SSHD, "-D", "-e",
		"-f", filepath.Join(h.dir, "sshd_config"))
	logf, err := os.OpenFile(filepath.Join(h.dir, "sshd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("test host %s: %w", h.Name, err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("test host %s: start sshd: %w", h.Name, err)
	}
	h.sshd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for {
		// From inside the namespace: a segment's hosts are not reachable
		// from the root namespace.
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		c, err := h.Dial(dctx, "tcp", net.JoinHostPort(h.Addr, "22"))
		cancel()
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("test host %s: sshd does not accept connections on %s:22: %w (see %s)", h.Name, h.Addr, err, filepath.Join(h.dir, "sshd.log"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// StopSSHD kills the host's sshd listener (not the sessions it forked, nor
// the processes started through it).
func (h *Host) StopSSHD() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sshd == nil {
		return
	}
	_ = syscall.Kill(-h.sshd.Process.Pid, syscall.SIGKILL)
	_ = h.sshd.Wait()
	h.sshd = nil
}

// HangAfterLogin restarts the host's sshd so that it accepts the login
// and then runs, for every session, a sleep of an hour instead of what the
// client asked: a host that authenticates and then never answers.
func (h *Host) HangAfterLogin(ctx context.Context) error {
	return h.ForceCommand(ctx, "sleep 3600")
}

// ForceCommand restarts the host's sshd so that every session runs command
// (by the login's shell) instead of what the client asked, which command
// finds in $SSH_ORIGINAL_COMMAND: a host that misbehaves as command says.
func (h *Host) ForceCommand(ctx context.Context, command string) error {
	f, err := os.OpenFile(filepath.Join(h.dir, "sshd_config"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("test host %s: %w", h.Name, err)
	}
	_, err = f.WriteString("ForceCommand " + command + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("test host %s: %w", h.Name, err)
	}
	h.StopSSHD()
	return h.StartSSHD(ctx)
}

// PIDs lists the processes in the host's network namespace: its sshd, the
// sessions and everything started through them. This process is not one of
// them even when listed: when Do's goroutine ran on the main thread, Go
// cannot end that thread, which stays in the namespace (killAll skips it
// too).
func (h *Host) PIDs(ctx context.Context) ([]int, error) {
	out, err := exec.CommandContext(ctx, "ip", "netns", "pids", h.Name).Output()
	if err != nil {
		return nil, fmt.Errorf("test host %s: list processes: %w", h.Name, err)
	}
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		if p, err := strconv.Atoi(f); err == nil && p != os.Getpid() {
			pids = append(pids, p)
		}
	}
	return pids, nil
}

// Kill is a host failure: its sshd and every process in its namespace die
// at once (SIGKILL), as when a machine loses power.
func (h *Host) Kill(ctx context.Context) error {
	h.StopSSHD()
	return killAll(ctx, h.Name)
}

// LinkDown cuts the host off the network without killing anything, as a
// failed switch port does: packets to it are dropped, no RST comes back.
func (h *Host) LinkDown(ctx context.Context) error {
	return run(ctx, h.linkArgv("down")...)
}

// LinkUp reconnects the host after LinkDown. It returns once the host's
// end has its carrier again: the kernel raises it after `ip link set up`
// returns, and on a busy machine a dial in between times out.
func (h *Host) LinkUp(ctx context.Context) error {
	if err := run(ctx, h.linkArgv("up")...); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		var running bool
		err := h.Do(func() error {
			ifi, err := net.InterfaceByName(h.Iface)
			if err != nil {
				return err
			}
			running = ifi.Flags&net.FlagRunning != 0
			return nil
		})
		if err != nil {
			return fmt.Errorf("test host %s: link up: %w", h.Name, err)
		}
		if running {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("test host %s: link up: no carrier on %s: %w", h.Name, h.Iface, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// linkArgv sets the far end of h's veth down or up, where it lives.
func (h *Host) linkArgv(state string) []string {
	argv := []string{"ip", "link", "set", h.veth, state}
	if h.linkNS != "" {
		argv = append([]string{"ip", "netns", "exec", h.linkNS}, argv...)
	}
	return argv
}

// Close kills everything in every host and removes the namespaces (and
// with them the veth pairs). It is safe to call more than once.
func (l *Lab) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	all := slices.Concat(l.Hosts, slices.Collect(maps.Values(l.Spaces)))
	for _, h := range all {
		if err := h.Kill(ctx); err != nil {
			errs = append(errs, err)
		}
		if h.linkNS == "" {
			// The kernel destroys a deleted namespace's veth pair in the
			// background: deleting our end now frees its address for the
			// next lab this process makes.
			_ = exec.CommandContext(ctx, "ip", "link", "del", h.veth).Run()
			subnets.Lock()
			delete(subnets.held, h.subnet)
			subnets.Unlock()
		}
		if err := remove(ctx, h.Name); err != nil {
			errs = append(errs, err)
		}
	}
	if l.Switch != "" {
		if err := remove(ctx, l.Switch); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func killAll(ctx context.Context, ns string) error {
	// Killed processes may leave children behind for a moment; a few rounds
	// catch what they forked.
	for range 5 {
		out, err := exec.CommandContext(ctx, "ip", "netns", "pids", ns).Output()
		if err != nil {
			return nil // the namespace is gone
		}
		pids := strings.Fields(string(out))
		if len(pids) == 0 {
			return nil
		}
		for _, f := range pids {
			if p, err := strconv.Atoi(f); err == nil && p != os.Getpid() {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

func remove(ctx context.Context, ns string) error {
	if err := exec.CommandContext(ctx, "ip", "netns", "del", ns).Run(); err != nil {
		if _, statErr := os.Stat(filepath.Join("/run/netns", ns)); os.IsNotExist(statErr) {
			return nil
		}
		return fmt.Errorf("test host %s: remove namespace: %w", ns, err)
	}
	return nil
}

// sweep removes the namespaces (and what runs in them) of test processes
// that died without closing their lab.
func sweep(ctx context.Context) {
	entries, err := os.ReadDir("/run/netns")
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) == nil {
			continue
		}
		_ = killAll(ctx, e.Name())
		_ = remove(ctx, e.Name())
	}
}

func run(ctx context.Context, argv ...string) error {
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("test hosts: %s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
