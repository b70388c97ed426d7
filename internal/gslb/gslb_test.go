package gslb

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
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
