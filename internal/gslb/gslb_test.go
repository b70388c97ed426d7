package gslb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shoal-lb/shoal/internal/config"
)

func TestHealthThresholds(t *testing.T) {
	c := config.GSLBCheck{UpThresh: 3, OKThresh: 2, DownThresh: 2}
	tests := []struct {
		name   string
		checks string // o: success, x: failure
		down   bool
	}{
		{"up at start", "", false},
		{"one failure", "x", false},
		{"down_thresh failures", "xx", true},
		{"failures need not be consecutive", "xox", true},
		{"ok_thresh successes forget failures", "xoox", false},
		{"up after up_thresh successes", "xxooo", false},
		{"not up before up_thresh", "xxoo", true},
		{"a failure restarts the count up", "xxooxoo", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h health
			for _, r := range tt.checks {
				h.observe(r == 'o', c)
			}
			if h.down != tt.down {
				t.Errorf("after %q: down = %v, want %v", tt.checks, h.down, tt.down)
			}
		})
	}
}

// site is an HTTP site on addr (port 0: any) that can be stopped and
// started again on the same port.
type testSite struct {
	t    *testing.T
	addr string
	srv  *httptest.Server
}

func newTestSite(t *testing.T, addr string) *testSite {
	s := &testSite{t: t, addr: addr}
	s.start()
	s.addr = s.srv.Listener.Addr().String()
	t.Cleanup(s.stop)
	return s
}

func (s *testSite) start() {
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		s.t.Fatal(err)
	}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	s.srv.Listener.Close()
	s.srv.Listener = ln
	s.srv.Start()
}

func (s *testSite) stop() { s.srv.Close() }

func (s *testSite) site(check config.GSLBCheck) config.GSLBSite {
	host, port, _ := net.SplitHostPort(s.addr)
	check.Port, _ = strconv.Atoi(port)
	return config.GSLBSite{Address: host, Check: check}
}

// serve runs the server of cfg until the test ends.
func serve(t *testing.T, cfg *config.GSLB) *Server {
	t.Helper()
	s, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return s
}

func query(t *testing.T, net, addr, name string, qtype uint16, edns bool) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	if edns {
		m.SetEdns0(4096, false)
	}
	c := &dns.Client{Net: net, Timeout: 2 * time.Second}
	var r *dns.Msg
	var err error
	// The server may still be starting its listeners' loops.
	for range 20 {
		if r, _, err = c.Exchange(m, addr); err == nil {
			return r
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s %s %s: %v", net, name, dns.TypeToString[qtype], err)
	return nil
}

func addrs(m *dns.Msg) []string {
	var out []string
	for _, rr := range m.Answer {
		switch rr := rr.(type) {
		case *dns.A:
			out = append(out, rr.A.String())
		case *dns.AAAA:
			out = append(out, rr.AAAA.String())
		}
	}
	slices.Sort(out)
	return out
}

// waitAnswer polls until the A answer for name is want and returns how long
// that took.
func waitAnswer(t *testing.T, addr, name string, want []string, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	var got []string
	for time.Since(start) < limit {
		got = addrs(query(t, "udp", addr, name, dns.TypeA, false))
		if slices.Equal(got, want) {
			return time.Since(start)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("after %s the answer is %v, want %v", limit, got, want)
	return 0
}

func TestFailover(t *testing.T) {
	check := config.GSLBCheck{Type: "http", Path: "/", Status: 200, Interval: 200 * time.Millisecond, Timeout: 100 * time.Millisecond, UpThresh: 3, OKThresh: 2, DownThresh: 2}
	a, b := newTestSite(t, "127.0.0.1:0"), newTestSite(t, "127.0.0.2:0")
	v6 := newTestSite(t, "[::1]:0")
	// A site down from the start is never answered: the first check decides.
	dead := newTestSite(t, "127.0.0.3:0")
	dead.stop()
	cfg := &config.GSLB{Listen: []string{"127.0.0.1:0"}, Zone: "example.org.", Records: []config.GSLBRecord{{
		Name: "www.example.org.", TTL: 5 * time.Second, Sites: []config.GSLBSite{a.site(check), b.site(check), v6.site(check), dead.site(check)},
	}}}
	s := serve(t, cfg)
	dnsAddr := s.Addrs()[0]
	both := []string{"127.0.0.1", "127.0.0.2"}
	if got := addrs(query(t, "udp", dnsAddr, "www.example.org.", dns.TypeA, false)); !slices.Equal(got, both) {
		t.Fatalf("A = %v, want %v", got, both)
	}
	r := query(t, "udp", dnsAddr, "www.example.org.", dns.TypeAAAA, false)
	if got := addrs(r); !slices.Equal(got, []string{"::1"}) || r.Answer[0].Header().Ttl != 5 {
		t.Fatalf("AAAA = %v", r.Answer)
	}

	// A site that stops answering leaves the answer within
	// interval × down_thresh (its next two checks fail).
	b.stop()
	bound := check.Interval * time.Duration(check.DownThresh)
	took := waitAnswer(t, dnsAddr, "www.example.org.", []string{"127.0.0.1"}, 5*time.Second)
	t.Logf("dropped after %s (interval × down_thresh = %s)", took, bound)
	if took > bound+100*time.Millisecond {
		t.Errorf("dropped after %s, want at most %s", took, bound)
	}
	if n := testutil.ToFloat64(s.transitions.WithLabelValues("www.example.org.", "127.0.0.2", "down")); n != 1 {
		t.Errorf("transitions to down = %v, want 1", n)
	}

	// Back after up_thresh consecutive successes.
	b.start()
	took = waitAnswer(t, dnsAddr, "www.example.org.", both, 5*time.Second)
	t.Logf("back after %s (up_thresh × interval = %s)", took, check.Interval*time.Duration(check.UpThresh))
	if min := check.Interval * time.Duration(check.UpThresh-1); took < min-50*time.Millisecond {
		t.Errorf("back after %s, before %d successes (%s)", took, check.UpThresh, min)
	}

	// All down: the answer has them all, as gdnsd gives.
	a.stop()
	b.stop()
	time.Sleep(bound + 2*check.Interval)
	if n := testutil.ToFloat64(s.transitions.WithLabelValues("www.example.org.", "127.0.0.1", "down")); n != 1 {
		t.Fatalf("127.0.0.1 not down: transitions %v", n)
	}
	all := []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"}
	if got := addrs(query(t, "udp", dnsAddr, "www.example.org.", dns.TypeA, false)); !slices.Equal(got, all) {
		t.Errorf("all down: A = %v, want all of %v", got, all)
	}
}

func TestProtocol(t *testing.T) {
	// Sites down from the first check on, so all of them are answered.
	idle := config.GSLBCheck{Type: "tcp", Port: 9, Interval: time.Hour, Timeout: 100 * time.Millisecond, UpThresh: 1, OKThresh: 1, DownThresh: 10}
	var many []config.GSLBSite
	for i := range 40 {
		many = append(many, config.GSLBSite{Address: fmt.Sprintf("127.0.1.%d", i+1), Check: idle})
	}
	cfg := &config.GSLB{Listen: []string{"127.0.0.1:0", "[::1]:0"}, Zone: "example.org.", Records: []config.GSLBRecord{
		{Name: "big.example.org.", TTL: 30 * time.Second, Sites: many},
		{Name: "a.b.example.org.", Sites: []config.GSLBSite{{Address: "127.0.2.1", Check: idle}}},
	}}
	s := serve(t, cfg)
	v4, v6 := s.Addrs()[0], s.Addrs()[1]

	// Over UDP without EDNS0 the 40 addresses do not fit in 512 bytes.
	r := query(t, "udp", v4, "big.example.org.", dns.TypeA, false)
	if !r.Truncated || len(r.Answer) >= 40 {
		t.Errorf("UDP: truncated %v with %d answers, want truncated", r.Truncated, len(r.Answer))
	}
	// dns.Client retries truncated answers over TCP only when asked: ask.
	r = query(t, "tcp", v4, "big.example.org.", dns.TypeA, false)
	if r.Truncated || len(r.Answer) != 40 || !r.Authoritative {
		t.Errorf("TCP: truncated %v with %d answers (aa %v), want 40", r.Truncated, len(r.Answer), r.Authoritative)
	}
	// With EDNS0 they fit in the 1232 bytes offered.
	r = query(t, "udp", v4, "big.example.org.", dns.TypeA, true)
	if opt := r.IsEdns0(); opt == nil || opt.UDPSize() != ednsSize || r.Truncated || len(r.Answer) != 40 {
		t.Errorf("EDNS0: opt %v, truncated %v, %d answers", opt, r.Truncated, len(r.Answer))
	}
	if r := query(t, "udp", v4, "big.example.org.", dns.TypeA, false); r.IsEdns0() != nil {
		t.Errorf("an answer without EDNS0 to a query without it has OPT")
	}

	bad := new(dns.Msg)
	bad.SetQuestion("big.example.org.", dns.TypeA)
	bad.SetEdns0(4096, false)
	bad.IsEdns0().SetVersion(1)
	if r, _, err := new(dns.Client).Exchange(bad, v4); err != nil || r.Rcode != dns.RcodeBadVers {
		t.Errorf("EDNS version 1: %v, %v; want BADVERS", r, err)
	}

	for _, tt := range []struct {
		name   string
		qtype  uint16
		rcode  int
		answer int
		soa    bool // in the authority section
	}{
		{"nope.example.org.", dns.TypeA, dns.RcodeNameError, 0, true},
		{"b.example.org.", dns.TypeA, dns.RcodeSuccess, 0, true}, // empty non-terminal
		{"big.example.org.", dns.TypeAAAA, dns.RcodeSuccess, 0, true},
		{"www.example.com.", dns.TypeA, dns.RcodeRefused, 0, false},
		{"example.org.", dns.TypeSOA, dns.RcodeSuccess, 1, false},
		{"EXAMPLE.org.", dns.TypeNS, dns.RcodeSuccess, 1, false},
	} {
		for _, addr := range []string{v4, v6} {
			r := query(t, "udp", addr, tt.name, tt.qtype, false)
			soa := len(r.Ns) == 1 && r.Ns[0].Header().Rrtype == dns.TypeSOA
			if r.Rcode != tt.rcode || len(r.Answer) != tt.answer || soa != tt.soa {
				t.Errorf("%s %s %s: %s, %d answers, SOA in authority %v; want %s, %d, %v", addr, tt.name, dns.TypeToString[tt.qtype],
					dns.RcodeToString[r.Rcode], len(r.Answer), soa, dns.RcodeToString[tt.rcode], tt.answer, tt.soa)
			}
		}
	}
	r = query(t, "udp", v4, "example.org.", dns.TypeNS, false)
	if ns, ok := r.Answer[0].(*dns.NS); !ok || ns.Ns != "ns1.example.org." {
		t.Errorf("NS = %v", r.Answer)
	}
}

func TestListenBusy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = New(&config.GSLB{Listen: []string{ln.Addr().String()}, Zone: "example.org."}, slog.New(slog.DiscardHandler))
	if err == nil {
		t.Fatal("New on a bound address succeeded")
	}
	t.Log(err)
}

// TCP checks pass on a listening port, over IPv4 and IPv6, and a site whose
// port stops listening leaves the answer.
func TestTCPChecks(t *testing.T) {
	check := config.GSLBCheck{Type: "tcp", Interval: 200 * time.Millisecond, Timeout: 100 * time.Millisecond, UpThresh: 3, OKThresh: 2, DownThresh: 2}
	a, b := newTestSite(t, "127.0.0.1:0"), newTestSite(t, "127.0.0.2:0")
	v6, v6b := newTestSite(t, "[::1]:0"), newTestSite(t, "[::1]:0")
	cfg := &config.GSLB{Listen: []string{"127.0.0.1:0"}, Zone: "example.org.", Records: []config.GSLBRecord{
		{Name: "tcp.example.org.", TTL: 5 * time.Second, Sites: []config.GSLBSite{a.site(check), b.site(check)}},
		{Name: "tcp6.example.org.", TTL: 5 * time.Second, Sites: []config.GSLBSite{v6.site(check)}},
		// A second record on the same IPv6 address but another port: its
		// check is its own.
		{Name: "other6.example.org.", TTL: 5 * time.Second, Sites: []config.GSLBSite{v6b.site(check)}},
	}}
	s := serve(t, cfg)
	dnsAddr := s.Addrs()[0]
	if got := addrs(query(t, "udp", dnsAddr, "tcp.example.org.", dns.TypeA, false)); !slices.Equal(got, []string{"127.0.0.1", "127.0.0.2"}) {
		t.Fatalf("A = %v, want both sites", got)
	}
	if got := addrs(query(t, "udp", dnsAddr, "tcp6.example.org.", dns.TypeAAAA, false)); !slices.Equal(got, []string{"::1"}) {
		t.Fatalf("AAAA = %v, want ::1", got)
	}
	if n := testutil.ToFloat64(s.transitions.WithLabelValues("tcp6.example.org.", "::1", "down")); n != 0 {
		t.Fatalf("the listening IPv6 site went down %v times", n)
	}

	b.stop()
	bound := check.Interval * time.Duration(check.DownThresh)
	took := waitAnswer(t, dnsAddr, "tcp.example.org.", []string{"127.0.0.1"}, 5*time.Second)
	if took > bound+100*time.Millisecond {
		t.Errorf("a closed port left the answer after %s, want at most %s", took, bound)
	}

	// The IPv6 site's check sees its port close too (the answer keeps it:
	// all of a record's sites down answers all of them).
	v6.stop()
	deadline := time.Now().Add(5 * time.Second)
	for testutil.ToFloat64(s.transitions.WithLabelValues("tcp6.example.org.", "::1", "down")) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the IPv6 site whose port closed was not marked down")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := testutil.ToFloat64(s.transitions.WithLabelValues("other6.example.org.", "::1", "down")); n != 0 {
		t.Errorf("the other IPv6 site, still listening, went down %v times", n)
	}
}

// TestListenerRestart breaks the real sockets under the running DNS
// servers: the UDP one is closed and its port held by another socket, so
// that binding it again must be retried; the TCP one is just closed. Each
// must answer again, with an event and the metrics saying so, and
// shutdown must leave no goroutine or socket behind.
func TestListenerRestart(t *testing.T) {
	before := runtime.NumGoroutine()
	s, err := New(&config.GSLB{Listen: []string{"127.0.0.1:0"}, Zone: "example.org."}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	s.backoff = backoff{min: 300 * time.Millisecond, max: 600 * time.Millisecond, healthy: time.Minute}
	restarted := make(chan string, 4)
	s.OnRestart(func(l, reason string) {
		t.Log(reason)
		restarted <- l
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()
	addr := s.Addrs()[0]
	soa := func(proto string) {
		t.Helper()
		if m := query(t, proto, addr, "example.org.", dns.TypeSOA, false); len(m.Answer) != 1 {
			t.Fatalf("%s SOA: %v", proto, m)
		}
	}
	soa("udp")
	soa("tcp")
	// metrics compares the listeners' metrics as /metrics shows them.
	metrics := func(udpUp, tcpUp, udpRestarts, tcpRestarts int) {
		t.Helper()
		want := fmt.Sprintf(`# HELP shoal_gslb_listener_up Whether a GSLB DNS listener serves (1) or is down and being bound again (0).
# TYPE shoal_gslb_listener_up gauge
shoal_gslb_listener_up{listen=%[1]q,proto="tcp"} %[3]d
shoal_gslb_listener_up{listen=%[1]q,proto="udp"} %[2]d
# HELP shoal_gslb_listener_restarts_total GSLB DNS listeners that failed and were bound and served again.
# TYPE shoal_gslb_listener_restarts_total counter
shoal_gslb_listener_restarts_total{listen=%[1]q,proto="tcp"} %[5]d
shoal_gslb_listener_restarts_total{listen=%[1]q,proto="udp"} %[4]d
`, addr, udpUp, tcpUp, udpRestarts, tcpRestarts)
		if err := testutil.CollectAndCompare(listenerCollector{s}, strings.NewReader(want)); err != nil {
			t.Error(err)
		}
	}
	listenerOf := func(proto string) *listener {
		for _, l := range s.listeners {
			if l.proto == proto {
				return l
			}
		}
		t.Fatalf("no %s listener", proto)
		return nil
	}
	waitRestart := func(want string) {
		t.Helper()
		select {
		case l := <-restarted:
			if l != want {
				t.Fatalf("restarted %q, want %q", l, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s not restarted; down: %v", want, s.ListenersDown())
		}
	}

	metrics(1, 1, 0, 0)
	listenerOf("udp").close()
	squat, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatalf("taking the UDP port: %v", err)
	}
	// Past the first bind attempts, which find the port taken.
	time.Sleep(time.Second)
	if down := s.ListenersDown(); !slices.Equal(down, []string{"udp " + addr}) {
		t.Errorf("down %v, want the UDP listener", down)
	}
	metrics(0, 1, 0, 0)
	squat.Close()
	waitRestart("udp " + addr)
	soa("udp")
	metrics(1, 1, 1, 0)

	listenerOf("tcp").close()
	waitRestart("tcp " + addr)
	soa("tcp")
	metrics(1, 1, 1, 1)
	if down := s.ListenersDown(); len(down) != 0 {
		t.Errorf("down after the restarts: %v", down)
	}

	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	// The sockets are closed: their ports can be bound again.
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Errorf("tcp port still held after shutdown: %v", err)
	} else {
		ln.Close()
	}
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Errorf("udp port still held after shutdown: %v", err)
	} else {
		pc.Close()
	}
	// The supervisors and their servers' goroutines are gone (the DNS
	// client's idle ones may take a moment).
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines after shutdown, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}

// Idle TCP connections from one address are capped, so they cannot keep
// another resolver's TCP query (a truncated answer's retry) from an answer.
func TestTCPConnectionsPerSource(t *testing.T) {
	cfg := &config.GSLB{Listen: []string{"127.0.0.1:0"}, Zone: "example.org.", Records: []config.GSLBRecord{
		{Name: "www.example.org.", Sites: []config.GSLBSite{{Address: "127.0.2.1", Check: config.GSLBCheck{Type: "tcp", Port: 9, Interval: time.Hour, Timeout: 100 * time.Millisecond, UpThresh: 1, OKThresh: 1, DownThresh: 10}}}},
	}}
	addr := serve(t, cfg).Addrs()[0]
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: time.Second}
	var open []net.Conn
	t.Cleanup(func() {
		for _, c := range open {
			c.Close()
		}
	})
	for range 300 { // more than the listener's whole limit
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, c)
	}
	// Those over the cap were closed at once: a read sees EOF.
	alive := 0
	for _, c := range open {
		c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); errors.Is(err, os.ErrDeadlineExceeded) {
			alive++
		}
	}
	if alive != tcpConns.PerSource {
		t.Errorf("127.0.0.2 holds %d connections, want %d", alive, tcpConns.PerSource)
	}
	if r := query(t, "tcp", addr, "www.example.org.", dns.TypeA, false); r.Rcode != dns.RcodeSuccess {
		t.Errorf("query over TCP from 127.0.0.1 during the flood: %s", dns.RcodeToString[r.Rcode])
	}
}
