// Package gslb is shoal's global server load balancing: an authoritative
// DNS server for one zone that answers each record's A and AAAA queries
// with the addresses of its sites whose health checks pass, checked as
// gdnsd's extmon/http_status monitors with the same thresholds.
package gslb

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-lb/shoal/internal/config"
)

// ednsSize is the UDP payload size the server offers: the DNS flag day 2020
// value, which avoids IP fragmentation.
const ednsSize = 1232

// negativeTTL is the SOA minimum: how long resolvers cache NXDOMAIN and
// empty answers.
const negativeTTL = 30

// record is one name of the zone.
type record struct {
	name   string
	ttl    uint32
	v4, v6 []*site
	next   atomic.Uint32 // rotates the answers, as gdnsd does
}

// Server is the DNS server and the monitors of its sites. New binds its
// sockets; Run serves until its context ends.
type Server struct {
	log     *slog.Logger
	zone    string
	ns      []string
	serial  uint32
	records map[string]*record
	sites   []*site

	// listeners are each listen address's TCP and then UDP socket.
	listeners []*listener
	backoff   backoff
	onRestart func(listener, reason string)

	transitions *prometheus.CounterVec
	queries     *prometheus.CounterVec
}

// New returns the server of cfg with its sockets bound: each listen
// address serves UDP and TCP on one port (with port 0, the port the system
// picks for TCP).
func New(cfg *config.GSLB, log *slog.Logger) (*Server, error) {
	s := &Server{
		log:     log,
		zone:    cfg.Zone,
		ns:      cfg.NS,
		serial:  uint32(time.Now().Unix()),
		records: map[string]*record{},
		backoff: defaultBackoff,
	}
	s.newCounters()
	if len(s.ns) == 0 {
		s.ns = []string{"ns1." + s.zone}
	}
	count := func(st *site, to string) {
		s.transitions.WithLabelValues(st.record, st.addr.String(), to).Inc()
	}
	for _, rc := range cfg.Records {
		r := &record{name: rc.Name, ttl: uint32(rc.TTL / time.Second)}
		for _, sc := range rc.Sites {
			st, err := newSite(rc.Name, sc, count)
			if err != nil {
				return nil, err
			}
			s.sites = append(s.sites, st)
			if st.addr.Is4() {
				r.v4 = append(r.v4, st)
			} else {
				r.v6 = append(r.v6, st)
			}
		}
		s.records[r.name] = r
	}
	for _, addr := range cfg.Listen {
		if err := s.listen(addr); err != nil {
			s.close()
			return nil, err
		}
	}
	return s, nil
}

// listen binds addr over TCP and then UDP on the same port.
func (s *Server) listen(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("gslb listen tcp %s: %w", addr, err)
	}
	bound := ln.Addr().String()
	s.listeners = append(s.listeners, &listener{proto: "tcp", addr: bound, ln: ln})
	pc, err := net.ListenPacket("udp", bound)
	if err != nil {
		return fmt.Errorf("gslb listen udp %s: %w", bound, err)
	}
	s.listeners = append(s.listeners, &listener{proto: "udp", addr: bound, pc: pc})
	return nil
}

func (s *Server) close() {
	for _, l := range s.listeners {
		l.close()
	}
}

// Addrs are the bound addresses, host:port, each served over UDP and TCP.
func (s *Server) Addrs() []string {
	var addrs []string
	for _, l := range s.listeners {
		if l.proto == "tcp" {
			addrs = append(addrs, l.addr)
		}
	}
	return addrs
}

// OnRestart sets what is called when a listener that failed serves again,
// with the listener ("udp 192.0.2.1:53") and why; call it before Run.
func (s *Server) OnRestart(f func(listener, reason string)) { s.onRestart = f }

// ListenersDown returns the listeners ("udp 192.0.2.1:53") that do not
// serve now.
func (s *Server) ListenersDown() []string {
	var down []string
	for _, l := range s.listeners {
		if !l.up.Load() {
			down = append(down, l.proto+" "+l.addr)
		}
	}
	return down
}

// Run checks the sites and, once each has been checked, answers queries
// until ctx ends, binding and serving again any listener whose server
// fails (see supervise); then it stops the DNS servers and the monitors and
// closes the sockets.
func (s *Server) Run(ctx context.Context) error {
	var wg, initial sync.WaitGroup
	for _, st := range s.sites {
		initial.Add(1)
		wg.Go(func() { st.monitor(ctx, s.log, sync.OnceFunc(initial.Done)) })
	}
	// As gdnsd, answer only once every site's first check has set its
	// state (each is bounded by its timeout).
	initial.Wait()
	for _, l := range s.listeners {
		wg.Go(func() { s.supervise(ctx, l) })
	}
	s.log.Info("gslb serving", "zone", s.zone, "listen", strings.Join(s.Addrs(), ","), "records", len(s.records), "sites", len(s.sites))
	wg.Wait()
	return nil
}

// ServeDNS answers one query.
func (s *Server) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	m := s.answer(req)
	if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
		size := dns.MinMsgSize
		if opt := req.IsEdns0(); opt != nil {
			size = max(size, min(int(opt.UDPSize()), ednsSize))
		}
		// Truncate keeps what fits and sets TC, so the client asks over TCP.
		m.Truncate(size)
	}
	s.queries.WithLabelValues(dns.RcodeToString[m.Rcode]).Inc()
	if err := w.WriteMsg(m); err != nil {
		s.log.Debug("gslb reply not sent", "remote", w.RemoteAddr().String(), "err", err)
	}
}

func (s *Server) answer(req *dns.Msg) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(req)
	m.Compress = true
	opt := req.IsEdns0()
	if opt != nil {
		m.SetEdns0(ednsSize, false)
		if opt.Version() != 0 {
			m.Rcode = dns.RcodeBadVers // Pack puts its upper bits in the OPT
			return m
		}
	}
	switch {
	case req.Opcode != dns.OpcodeQuery:
		m.Rcode = dns.RcodeNotImplemented
		return m
	case len(req.Question) != 1:
		m.Rcode = dns.RcodeFormatError
		return m
	}
	q := req.Question[0]
	name := dns.CanonicalName(q.Name)
	if q.Qclass != dns.ClassINET || !dns.IsSubDomain(s.zone, name) {
		m.Rcode = dns.RcodeRefused
		return m
	}
	m.Authoritative = true
	if name == s.zone {
		switch q.Qtype {
		case dns.TypeSOA:
			m.Answer = append(m.Answer, s.soa())
		case dns.TypeNS:
			for _, ns := range s.ns {
				m.Answer = append(m.Answer, &dns.NS{Hdr: header(s.zone, dns.TypeNS, 3600), Ns: ns})
			}
		}
	}
	r, ok := s.records[name]
	switch {
	case ok:
		m.Answer = append(m.Answer, r.answer(q.Qtype)...)
	case name != s.zone && !s.interior(name):
		m.Rcode = dns.RcodeNameError
	}
	if len(m.Answer) == 0 {
		m.Ns = append(m.Ns, s.soa())
	}
	return m
}

// interior reports whether name has records below it: it exists, with no
// data of its own (an empty non-terminal).
func (s *Server) interior(name string) bool {
	for n := range s.records {
		if strings.HasSuffix(n, "."+name) {
			return true
		}
	}
	return false
}

func header(name string, t uint16, ttl uint32) dns.RR_Header {
	return dns.RR_Header{Name: name, Rrtype: t, Class: dns.ClassINET, Ttl: ttl}
}

func (s *Server) soa() dns.RR {
	return &dns.SOA{
		Hdr: header(s.zone, dns.TypeSOA, negativeTTL), Ns: s.ns[0], Mbox: "hostmaster." + s.zone,
		Serial: s.serial, Refresh: 3600, Retry: 600, Expire: 604800, Minttl: negativeTTL,
	}
}

// answer returns the record's addresses of type t: those of the sites that
// are up or, when none is, all of them, as gdnsd does.
func (r *record) answer(t uint16) []dns.RR {
	var sites []*site
	switch t {
	case dns.TypeA:
		sites = r.v4
	case dns.TypeAAAA:
		sites = r.v6
	default:
		return nil
	}
	var up []*site
	for _, st := range sites {
		if st.up.Load() {
			up = append(up, st)
		}
	}
	if len(up) == 0 {
		up = sites
	}
	rrs := make([]dns.RR, 0, len(up))
	first := 0
	if len(up) > 0 {
		first = int(r.next.Add(1) % uint32(len(up)))
	}
	for i := range up {
		st := up[(first+i)%len(up)]
		if t == dns.TypeA {
			rrs = append(rrs, &dns.A{Hdr: header(r.name, t, r.ttl), A: st.addr.AsSlice()})
		} else {
			rrs = append(rrs, &dns.AAAA{Hdr: header(r.name, t, r.ttl), AAAA: st.addr.AsSlice()})
		}
	}
	return rrs
}

// Collectors are the server's metrics, for the core's registry.
func (s *Server) Collectors() []prometheus.Collector {
	return []prometheus.Collector{s.transitions, s.queries, siteCollector{s}, listenerCollector{s}}
}

// newCounters makes s's counters; each server has its own.
func (s *Server) newCounters() {
	s.transitions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shoal_gslb_site_transitions_total",
		Help: "GSLB sites that changed state, by record, address and the state entered (up, down).",
	}, []string{"record", "address", "state"})
	s.queries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shoal_gslb_queries_total",
		Help: "DNS queries answered, by response code.",
	}, []string{"rcode"})
}

// The gauges and counters the collectors read at scrape time.
var (
	upDesc       = prometheus.NewDesc("shoal_gslb_site_up", "Whether a GSLB site's checks pass (1) or not (0).", []string{"record", "address"}, nil)
	listenerDesc = prometheus.NewDesc("shoal_gslb_listener_up", "Whether a GSLB DNS listener serves (1) or is down and being bound again (0).", []string{"listen", "proto"}, nil)
	restartsDesc = prometheus.NewDesc("shoal_gslb_listener_restarts_total", "GSLB DNS listeners that failed and were bound and served again.", []string{"listen", "proto"}, nil)
)

// MetricCollectors are a server's collectors with no server behind them:
// what they describe, for the metrics reference.
func MetricCollectors() []prometheus.Collector {
	s := &Server{}
	s.newCounters()
	return s.Collectors()
}

// siteCollector reports each site's state at scrape time.
type siteCollector struct{ s *Server }

func (c siteCollector) Describe(ch chan<- *prometheus.Desc) { ch <- upDesc }

func (c siteCollector) Collect(ch chan<- prometheus.Metric) {
	for _, st := range c.s.sites {
		v := 0.0
		if st.up.Load() {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(upDesc, prometheus.GaugeValue, v, st.record, st.addr.String())
	}
}

// listenerCollector reports each DNS listener's state and restarts at
// scrape time.
type listenerCollector struct{ s *Server }

func (c listenerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- listenerDesc
	ch <- restartsDesc
}

func (c listenerCollector) Collect(ch chan<- prometheus.Metric) {
	for _, l := range c.s.listeners {
		v := 0.0
		if l.up.Load() {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(listenerDesc, prometheus.GaugeValue, v, l.addr, l.proto)
		ch <- prometheus.MustNewConstMetric(restartsDesc, prometheus.CounterValue, float64(l.restarts.Load()), l.addr, l.proto)
	}
}
