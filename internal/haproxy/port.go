package haproxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/proc"
)

// listener is a listening TCP socket found in /proc/net/tcp{,6}.
type listener struct {
	ip    net.IP
	port  int
	inode uint64
}

// tcpListeners reads the listening sockets of /proc/net/tcp and tcp6.
func tcpListeners() ([]listener, error) {
	var all []listener
	for _, name := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(name)
		if errors.Is(err, os.ErrNotExist) {
			continue // no IPv6
		}
		if err != nil {
			return nil, fmt.Errorf("list listening sockets: %w", err)
		}
		all = append(all, parseProcNetTCP(b)...)
	}
	return all, nil
}

// parseProcNetTCP returns the sockets in state LISTEN (0A) of a
// /proc/net/tcp{,6} table; lines it cannot read are skipped.
func parseProcNetTCP(b []byte) []listener {
	var ls []listener
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		if len(f) < 10 || f[3] != "0A" {
			continue
		}
		addr, port, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		raw, err := hex.DecodeString(addr)
		if err != nil || (len(raw) != 4 && len(raw) != 16) {
			continue
		}
		// The address is written as 32-bit words in host byte order.
		ip := make(net.IP, len(raw))
		for i := 0; i < len(raw); i += 4 {
			binary.BigEndian.PutUint32(ip[i:], binary.NativeEndian.Uint32(raw[i:]))
		}
		p, err1 := strconv.ParseUint(port, 16, 16)
		inode, err2 := strconv.ParseUint(f[9], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		ls = append(ls, listener{ip: ip, port: int(p), inode: inode})
	}
	return ls
}

// conflicts reports whether binding host:port would collide with l: same
// port and the same address, or either side on every address. A host that is
// not an IP literal (a name) is taken to collide with any address.
func (l listener) conflicts(host string, port int) bool {
	if l.port != port {
		return false
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return host == "" || ip == nil || ip.IsUnspecified() || l.ip.IsUnspecified() || ip.Equal(l.ip)
}

// socketOwners returns the pids holding any of inodes open, by scanning
// /proc/*/fd. Processes it may not inspect are skipped.
func socketOwners(inodes map[uint64]bool) []int {
	procs, _ := os.ReadDir("/proc")
	var pids []int
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		fds, _ := os.ReadDir(filepath.Join("/proc", p.Name(), "fd"))
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join("/proc", p.Name(), "fd", fd.Name()))
			if err != nil {
				continue
			}
			num, ok := strings.CutPrefix(link, "socket:[")
			if !ok {
				continue
			}
			inode, err := strconv.ParseUint(strings.TrimSuffix(num, "]"), 10, 64)
			if err == nil && inodes[inode] {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

func cmdline(pid int) []string {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

func parentPID(pid int) int {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "PPid:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// runsConfig reports whether argv is an HAProxy reading config.
func runsConfig(argv []string, config string) bool {
	for i := 0; i+1 < len(argv); i++ {
		if argv[i] == "-f" && argv[i+1] == config {
			return true
		}
	}
	return false
}

// describeProc names a process for error messages: its pid and command line.
func describeProc(pid int) string {
	cmd := strings.Join(cmdline(pid), " ")
	if len(cmd) > 200 {
		cmd = cmd[:200] + "..."
	}
	if cmd == "" {
		return fmt.Sprintf("pid %d", pid)
	}
	return fmt.Sprintf("pid %d (%s)", pid, cmd)
}

// portHolders returns the pids listening where the frontends must bind
// (binds, host:port each), and the socket inodes when none of their
// processes can be seen.
func portHolders(binds []string) (pids []int, inodes map[uint64]bool, err error) {
	ls, err := tcpListeners()
	if err != nil {
		return nil, nil, err
	}
	inodes = make(map[uint64]bool)
	for _, b := range binds {
		host, p, err := net.SplitHostPort(b)
		if err != nil {
			return nil, nil, fmt.Errorf("bind address %q: %w", b, err)
		}
		port, err := strconv.Atoi(p)
		if err != nil {
			return nil, nil, fmt.Errorf("bind address %q: bad port", b)
		}
		for _, l := range ls {
			if l.conflicts(host, port) {
				inodes[l.inode] = true
			}
		}
	}
	if len(inodes) == 0 {
		return nil, nil, nil
	}
	return socketOwners(inodes), inodes, nil
}

// binds lists every frontend's bind addresses.
func binds(cfg *config.Config) []string {
	var bs []string
	for _, fe := range cfg.Frontends {
		bs = append(bs, fe.Bind...)
	}
	return bs
}

// claimPort makes sure the frontend's port is free before a master starts.
// A master of this state directory that no record names (its record was
// lost) is soft-stopped so that it cannot keep serving a stale server list;
// any other holder of the port is an error that names it.
func (m *Manager) claimPort(ctx context.Context) error {
	bs := binds(m.config())
	addrs := strings.Join(bs, ", ")
	pids, inodes, err := portHolders(bs)
	if err != nil || inodes == nil {
		return err
	}
	if len(pids) == 0 {
		return fmt.Errorf("bind address %s is already in use by a process shoal cannot inspect (another user's?)", addrs)
	}
	masters := make(map[int]bool)
	for _, pid := range pids {
		if !runsConfig(cmdline(pid), m.paths.Config) {
			return fmt.Errorf("bind address %s is already in use by %s", addrs, describeProc(pid))
		}
		// A worker's parent is its master; the master's parent is not ours.
		master := pid
		for pp := parentPID(master); pp > 1 && runsConfig(cmdline(pp), m.paths.Config); pp = parentPID(pp) {
			master = pp
		}
		masters[master] = true
	}
	for pid := range masters {
		if err := m.stopOrphan(ctx, pid); err != nil {
			return err
		}
	}
	// The sockets close as the processes exit.
	deadline := time.Now().Add(2 * time.Second)
	for {
		pids, inodes, err := portHolders(bs)
		if err != nil || inodes == nil {
			return err
		}
		if time.Now().After(deadline) {
			who := "a process shoal cannot inspect"
			if len(pids) > 0 {
				who = describeProc(pids[0])
			}
			return fmt.Errorf("bind address %s is still in use by %s after stopping the unrecorded haproxy", addrs, who)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stopOrphan soft-stops an HAProxy master of this state directory that the
// master record does not name, killing its process group after replaceGrace.
func (m *Manager) stopOrphan(ctx context.Context, pid int) error {
	// shoal starts each master as the leader of its own process group;
	// anything else was not started by shoal and is not ours to stop.
	if pgid, err := syscall.Getpgid(pid); err != nil || pgid != pid {
		return fmt.Errorf("bind address %s is already in use by %s, which runs shoal's haproxy config but was not started by shoal", strings.Join(binds(m.config()), ", "), describeProc(pid))
	}
	start, err := proc.StartTicks(pid)
	if err != nil {
		return nil // exited meanwhile
	}
	p, err := proc.Adopt(pid, start)
	if errors.Is(err, proc.ErrGone) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("adopt unrecorded haproxy %d: %w", pid, err)
	}
	m.log.Warn("stopping an haproxy of this state directory that no record names (its master record was lost)", "pid", pid, "bind", strings.Join(binds(m.config()), ","))
	sctx, cancel := context.WithTimeout(ctx, replaceGrace)
	defer cancel()
	if err := softStop(sctx, p); err != nil {
		return fmt.Errorf("stop unrecorded haproxy (pid %d): %w", pid, err)
	}
	return nil
}
