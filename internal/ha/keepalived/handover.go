package keepalived

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A VRRP move breaks every TCP connection to the VIP: the new holder has
// no socket for them and resets them. A client retries an idempotent
// request that was reset on a reused connection before any of its answer
// came, but not one whose answer was being sent, nor one on a fresh
// connection. So a graceful handover first empties the old holder:
//
//	Hold: drop SYNs to the VIP ──► Closing(true): each connection closes
//	after its answer ──► quiet (no request in HAProxy, no socket on the VIP
//	with bytes unacknowledged, none opened but still without its first
//	request) or handoverDrainMax ──► Yield: FAULT, a
//	priority-0 advert, the backup takes the VIP ──► release the hold,
//	Closing(false) ──► (caller: leadership moves) ──► Unyield
//
// A client whose SYN was dropped sends it again after 1 s (Linux's initial
// retransmission timeout), and again 2 s later (1 s from Linux 6.5): when
// the drain and the move take less than that first second, it waits 1 s.
// The drain takes about 0.1 s; the move, VRRP's skew time,
// (256-priority)/256 of an advert: 0.3 s at a 0.5 s advert, 0.65 s at 1 s.
// On a saturated machine the drain's polls are slow (each runs ss) and it
// takes longer: a request still being answered when the VIP leaves hangs
// until its client gives up (the old holder can no longer send from the
// address), while a held SYN only waits for its next retransmission. So
// handoverDrainMax bounds the drain at a second, not less: at 300 ms, 8 of
// 2,756 requests were cut beside the whole of make test (drained in 543 ms,
// not quiet). A connection idle at the move is reset by the new holder at
// its next request, which the client retries on a fresh connection.

// Handover timings. The hold's set element expires by itself after
// handoverHoldMax, so that a shoal that dies mid-handover cannot leave its
// node refusing connections.
const (
	handoverDrainMax = time.Second
	handoverHoldMax  = 5 * time.Second
	handoverLeaveMax = 5 * time.Second
	quietPoll        = 20 * time.Millisecond
)

// nftTable is the node's nftables table (guard), which Start replaces and
// Stop deletes; heldSet, in it, lists the VIP while a handover holds new
// connections.
const (
	nftTable = "shoal_vip"
	heldSet  = "held"
)

// yieldFile, in Dir, is keepalived's track file: 1 puts the node in FAULT
// (read at once, through inotify), 0 lets it hold the VIP again.
const yieldFile = "yield"

// Drainer is the data plane behind the VIP: Closing makes every connection
// close after its current answer (or stops that), Requests counts the
// requests in progress.
type Drainer interface {
	Closing(ctx context.Context, on bool) error
	Requests(ctx context.Context) (int, error)
}

// HandoverResult says how a handover went.
type HandoverResult struct {
	// Drained is how long the old holder took to have no request in
	// progress and nothing unacknowledged on the VIP; Quiet is false when
	// handoverDrainMax ended the wait first.
	Drained time.Duration
	Quiet   bool
	// Left is when the VIP left this node, after the handover began.
	Left time.Duration
}

// Handover gives the VIP to another node without cutting a request (see
// above); the node stays yielded (FAULT) until Unyield, so that it does not
// take the address back before the new holder outranks it. It fails, and
// undoes the yield, if the VIP does not leave within handoverLeaveMax.
func (s *Supervisor) Handover(ctx context.Context, d Drainer) (HandoverResult, error) {
	var res HandoverResult
	if s.State() != "MASTER" {
		return res, errors.New("this node does not hold the VIP")
	}
	start := time.Now()
	if err := s.hold(ctx); err != nil {
		return res, err
	}
	defer func() {
		if err := s.release(context.WithoutCancel(ctx)); err != nil {
			s.log.Error("handover: releasing the hold on new connections failed", "err", err)
		}
	}()
	if err := d.Closing(ctx, true); err != nil {
		return res, fmt.Errorf("handover: make connections close after their answer: %w", err)
	}
	defer func() {
		if err := d.Closing(context.WithoutCancel(ctx), false); err != nil {
			s.log.Error("handover: keep-alive back on failed", "err", err)
		}
	}()
	res.Quiet = s.waitQuiet(ctx, d, start.Add(handoverDrainMax))
	res.Drained = time.Since(start)
	if err := s.yield(true); err != nil {
		return res, err
	}
	for s.State() == "MASTER" {
		if time.Since(start) > handoverLeaveMax {
			err := fmt.Errorf("handover: the VIP did not leave within %s", handoverLeaveMax)
			return res, errors.Join(err, s.Unyield())
		}
		select {
		case <-ctx.Done():
			return res, errors.Join(ctx.Err(), s.Unyield())
		case <-time.After(quietPoll):
		}
	}
	res.Left = time.Since(start)
	return res, nil
}

// Unyield lets the node hold the VIP again (after Handover).
func (s *Supervisor) Unyield() error { return s.yield(false) }

func (s *Supervisor) yield(on bool) error {
	v := "0\n"
	if on {
		v = "1\n"
	}
	if err := writeFileAtomic(filepath.Join(s.o.Dir, yieldFile), []byte(v)); err != nil {
		return fmt.Errorf("keepalived track file: %w", err)
	}
	return nil
}

// waitQuiet waits until two polls in a row find no request in progress and
// no socket on the VIP with bytes in flight, or until deadline; it reports
// which.
func (s *Supervisor) waitQuiet(ctx context.Context, d Drainer, deadline time.Time) bool {
	quiet, reqs, socks := 0, 0, 0
	var which []string
	for quiet < 2 {
		if time.Now().After(deadline) {
			s.log.Warn("handover: the drain's time is up with requests in flight", "requests", reqs, "sockets", socks, "first", strings.Join(which, ", "))
			return false
		}
		var err error
		if reqs, err = d.Requests(ctx); err == nil {
			socks, which, err = s.unfinished()
		}
		if err == nil {
			var n int
			var w []string
			n, w, err = s.fresh(ctx)
			socks, which = socks+n, append(which, w...)
		}
		if err != nil {
			s.log.Warn("handover: counting what is in flight failed", "err", err)
		}
		if err == nil && reqs == 0 && socks == 0 {
			quiet++
		} else {
			quiet = 0
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(quietPoll):
		}
	}
	return true
}

// guard installs the node's nftables table, replacing one a crashed run
// left: SYNs to the VIP that find no socket are dropped, not refused. When
// the node's processes die with its kernel alive (a crash, an OOM kill),
// the kernel keeps the VIP until the standby's gratuitous ARP and would
// answer every new connection with a RST meanwhile; dropped, a SYN is sent
// again by the client after 1 s (then each second from Linux 6.5, at 3 s
// and 7 s before) and reaches the new holder, as when a machine dies. Packets of established connections are left alone: a
// connection whose socket died with its process is reset, and the client
// retries on a new one, whose SYN waits. The table stays when the processes
// die; Stop deletes it. It also holds the handover's set (hold).
func (s *Supervisor) guard(ctx context.Context) error {
	family, typ := "ip", "ipv4_addr"
	if s.vip.Addr().Is6() {
		family, typ = "ip6", "ipv6_addr"
	}
	// The table is declared, then deleted, then written whole: one
	// transaction that replaces it, whether it was there or not.
	rules := fmt.Sprintf(`table inet %[1]s
delete table inet %[1]s
table inet %[1]s {
	set %[2]s {
		type %[3]s
		flags timeout
	}
	chain input {
		type filter hook input priority filter - 10; policy accept;
		%[4]s daddr %[5]s tcp flags & (syn | ack) == syn jump syn
	}
	chain syn {
		%[4]s daddr @%[2]s drop
		socket transparent 0 accept
		socket transparent 1 accept
		drop
	}
}
`, nftTable, heldSet, typ, family, s.vip.Addr())
	path := filepath.Join(s.o.Dir, "guard.nft")
	if err := writeFileAtomic(path, []byte(rules)); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return s.nftRun(ctx, "drop SYNs to the VIP that no socket takes", "-f", path)
}

// unguard deletes the node's table, if there is one.
func (s *Supervisor) unguard(ctx context.Context) error {
	err := s.nftRun(ctx, "delete nftables table "+nftTable, "delete", "table", "inet", nftTable)
	if err != nil && strings.Contains(err.Error(), "No such file or directory") {
		return nil
	}
	return err
}

// hold drops the SYNs of new connections to the VIP, for handoverHoldMax
// at most (an element with a timeout in the guard's set).
func (s *Supervisor) hold(ctx context.Context) error {
	ms := strconv.FormatInt(handoverHoldMax.Milliseconds(), 10)
	elem := fmt.Sprintf("{ %s timeout %sms }", s.vip.Addr(), ms)
	return s.nftRun(ctx, "handover: hold new connections", "add", "element", "inet", nftTable, heldSet, elem)
}

// release ends the hold.
func (s *Supervisor) release(ctx context.Context) error {
	return s.nftRun(ctx, "handover: release the hold on new connections", "flush", "set", "inet", nftTable, heldSet)
}

// nftRun runs nft with args in the node's namespace; what says what it
// was for, in the error.
func (s *Supervisor) nftRun(ctx context.Context, what string, args ...string) error {
	cctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	if out, err := s.command(cctx, append([]string{s.nft}, args...)...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s (%s %s): %w: %s", what, s.nft, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// unfinished counts the TCP sockets on the VIP (in keepalived's network
// namespace, which is the node's) that still have bytes to send or to read,
// or a handshake or close under way: a move now would cut what they carry.
// It returns the first few as /proc prints them (remote address, state,
// queues), for the log.
func (s *Supervisor) unfinished() (int, []string, error) {
	s.mu.Lock()
	pid := s.proc.PID()
	s.mu.Unlock()
	total := 0
	var which []string
	for _, name := range []string{"tcp", "tcp6"} {
		f, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", pid, name))
		if err != nil {
			return 0, nil, fmt.Errorf("read keepalived's sockets: %w", err)
		}
		n, w, err := countUnfinished(f, s.vip.Addr())
		f.Close()
		if err != nil {
			return 0, nil, fmt.Errorf("/proc/%d/net/%s: %w", pid, name, err)
		}
		total += n
		which = append(which, w...)
	}
	return total, which, nil
}

// fresh counts the connections to the VIP that are established but have
// not received a byte: their client has yet to send its first request
// (say, it connected just before the hold and is slow to write). HAProxy
// has no stream for them and their queues are empty, but a move now would
// have the new holder reset that request, and a client retries a request
// only on a connection it reused. tcp_info's bytes_received tells them
// from idle keep-alive connections; ss prints it (none when it is 0).
func (s *Supervisor) fresh(ctx context.Context) (int, []string, error) {
	src := s.vip.Addr().String()
	if s.vip.Addr().Is6() {
		src = "[" + src + "]"
	}
	cctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	out, err := s.command(cctx, "ss", "-tniOH", "state", "established", "src", src).Output()
	if err != nil {
		return 0, nil, fmt.Errorf("list the connections to the VIP (ss): %w", err)
	}
	return countFresh(string(out))
}

// countFresh reads `ss -tniOH` lines (Recv-Q Send-Q Local Peer info...)
// and counts those without bytes_received, returning the first few peers.
func countFresh(out string) (int, []string, error) {
	n := 0
	var which []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 4 {
			return 0, nil, fmt.Errorf("ss line %q: expected Recv-Q Send-Q local peer", line)
		}
		if slices.ContainsFunc(f[4:], func(w string) bool { return strings.HasPrefix(w, "bytes_received:") }) {
			continue
		}
		n++
		if len(which) < 5 {
			which = append(which, f[3]+" established, nothing received")
		}
	}
	return n, which, nil
}

// TCP states in /proc/net/tcp (include/net/tcp_states.h).
const (
	tcpEstablished = 0x01
	tcpSynRecv     = 0x03
	tcpFinWait1    = 0x04
	tcpCloseWait   = 0x08
	tcpLastAck     = 0x09
	tcpClosing     = 0x0b
)

// countUnfinished reads /proc/net/tcp or tcp6 and counts the sockets whose
// local address is addr and that are mid-handshake, have a FIN not yet
// acknowledged, or hold queued bytes; but not those retransmitting, whose
// peer does not answer (orphans of a node that was cut off and killed
// linger so for minutes), nor those probing a zero window, whose peer does
// not read: waiting for them would only spend the drain.
func countUnfinished(r io.Reader, addr netip.Addr) (int, []string, error) {
	sc := bufio.NewScanner(r)
	n, first := 0, true
	var which []string
	count := func(f []string) {
		n++
		if len(which) < 5 {
			which = append(which, strings.Join(f[2:7], " "))
		}
	}
	for sc.Scan() {
		if first { // the header
			first = false
			continue
		}
		// sl local_address rem_address st tx_queue:rx_queue tr:when retrnsmt ...
		f := strings.Fields(sc.Text())
		if len(f) < 7 {
			return 0, nil, fmt.Errorf("line %q: expected at least 7 fields", sc.Text())
		}
		host, _, ok := strings.Cut(f[1], ":")
		if !ok {
			return 0, nil, fmt.Errorf("local address %q: expected HEX:PORT", f[1])
		}
		local, err := procAddr(host)
		if err != nil {
			return 0, nil, err
		}
		if local.Unmap() != addr.Unmap() {
			continue
		}
		st, err := strconv.ParseUint(f[3], 16, 8)
		if err != nil {
			return 0, nil, fmt.Errorf("state %q: %w", f[3], err)
		}
		tx, rx, ok := strings.Cut(f[4], ":")
		if !ok {
			return 0, nil, fmt.Errorf("queues %q: expected TX:RX", f[4])
		}
		if strings.Trim(f[6], "0") != "" || strings.HasPrefix(f[5], "04:") {
			continue // retransmitting, or probing a zero window
		}
		queued := strings.Trim(tx, "0") != "" || strings.Trim(rx, "0") != ""
		switch st {
		case tcpSynRecv, tcpFinWait1, tcpLastAck, tcpClosing:
			count(f)
		case tcpEstablished, tcpCloseWait:
			if queued {
				count(f)
			}
		}
	}
	return n, which, sc.Err()
}

// procAddr decodes an address as /proc/net/tcp prints it: the bytes of each
// 32-bit word in host (little-endian) order.
func procAddr(h string) (netip.Addr, error) {
	b, err := hex.DecodeString(h)
	if err != nil || (len(b) != 4 && len(b) != 16) {
		return netip.Addr{}, fmt.Errorf("address %q: expected 8 or 32 hex digits", h)
	}
	for i := 0; i < len(b); i += 4 {
		b[i], b[i+1], b[i+2], b[i+3] = b[i+3], b[i+2], b[i+1], b[i]
	}
	a, _ := netip.AddrFromSlice(b)
	return a, nil
}
