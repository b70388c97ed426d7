package config

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"
	"gopkg.in/yaml.v3"

	"github.com/shoal-lb/shoal/internal/haproxy/hapword"
)

// GSLB is an authoritative DNS server for one zone that answers each record
// with the addresses of its sites whose checks pass (see package gslb).
type GSLB struct {
	// Listen are host:port addresses served over both UDP and TCP.
	Listen []string `yaml:"listen" required:"true"`
	// Zone is the zone's apex, a domain name; Load makes it absolute.
	Zone string `yaml:"zone" required:"true"`
	// NS are the zone's name servers, absolute; none means ns1.ZONE.
	NS      []string     `yaml:"ns"`
	Records []GSLBRecord `yaml:"records" required:"true"`
}

// GSLBRecord is one name of the zone and the sites its A and AAAA answers
// are chosen from.
type GSLBRecord struct {
	// Name is relative to the zone ("www", "@" for the apex) or absolute
	// ("www.example.org."), and must be in the zone; Load makes it absolute.
	Name  string        `yaml:"name" required:"true"`
	TTL   time.Duration `yaml:"ttl"`
	Sites []GSLBSite    `yaml:"sites" required:"true"`
}

var defaultGSLBRecord = GSLBRecord{TTL: 30 * time.Second}

// GSLBSite is one address of a record and how its health is checked.
type GSLBSite struct {
	// Address is an IPv4 address (answered in A) or IPv6 (in AAAA); Load
	// writes it in its canonical form.
	Address string    `yaml:"address" required:"true"`
	Check   GSLBCheck `yaml:"check"`
}

// GSLBCheck is a site's health check, with the thresholds of gdnsd's
// service_types: a site goes DOWN after DownThresh failures with no OKThresh
// consecutive successes between them, and UP after UpThresh consecutive
// successes.
type GSLBCheck struct {
	// Type is http (a GET that must answer Status) or tcp (a connect).
	Type string `yaml:"type"`
	Port int    `yaml:"port"`
	// Path and Host are the http check's request path and Host header.
	Path   string `yaml:"path"`
	Host   string `yaml:"host"`
	Status int    `yaml:"status"`
	// Interval is the time between checks; Timeout bounds one, and is
	// shorter than Interval (by default half of it, as in gdnsd).
	Interval   time.Duration `yaml:"interval"`
	Timeout    time.Duration `yaml:"timeout"`
	UpThresh   int           `yaml:"up_thresh"`
	OKThresh   int           `yaml:"ok_thresh"`
	DownThresh int           `yaml:"down_thresh"`
}

// defaultGSLBCheck has gdnsd's defaults: interval 10 s, timeout half the
// interval, up 20, ok 10, down 10.
var defaultGSLBCheck = GSLBCheck{
	Type: "http", Port: 80, Path: "/", Status: 200,
	Interval: 10 * time.Second, Timeout: 5 * time.Second,
	UpThresh: 20, OKThresh: 10, DownThresh: 10,
}

// Bounds of gslb values: gdnsd takes thresholds up to 65535; an interval
// below 100 ms would be a check storm rather than a health check.
const (
	minGSLBInterval = 100 * time.Millisecond
	maxGSLBInterval = time.Hour
	maxGSLBThresh   = 65535
	maxGSLBTTL      = 7 * 24 * time.Hour
)

func (d *decoder) gslb(n *yaml.Node) *GSLB {
	f := section[GSLB](d, n, "gslb")
	g := &GSLB{}
	for _, it := range f.strings("listen") {
		if err := checkHostPort(it.val); err != nil {
			d.errorf(it.node, it.field, "%v", err)
		} else {
			d.listenTCP(it.node, it.field, it.val, byShoal)
		}
		g.Listen = append(g.Listen, it.val)
	}
	if ln := f.get("listen"); ln != nil && len(g.Listen) == 0 && ln.Kind == yaml.SequenceNode {
		d.errorf(ln, "gslb.listen", "must list at least one host:port")
	}
	zone, zn := f.str("zone", "")
	if zn != nil {
		if _, ok := dns.IsDomainName(zone); !ok || zone == "" {
			d.errorf(zn, "gslb.zone", "must be a domain name, got %q", zone)
		}
		g.Zone = dns.CanonicalName(zone)
	}
	for _, it := range f.strings("ns") {
		if _, ok := dns.IsDomainName(it.val); !ok || !dns.IsFqdn(it.val) {
			d.errorf(it.node, it.field, "must be an absolute domain name (ending in a dot), got %q", it.val)
		}
		g.NS = append(g.NS, dns.CanonicalName(it.val))
	}
	rn := f.get("records")
	if rn == nil {
		return g
	}
	items, ok := d.sequence(rn, "gslb.records", "a list of records")
	if !ok {
		return g
	}
	names := map[string]int{}
	for i, item := range items {
		path := fmt.Sprintf("gslb.records[%d]", i)
		r := d.gslbRecord(item, path, g.Zone)
		if r.Name == "" {
			continue
		}
		if first, dup := names[r.Name]; dup {
			d.errorAt(path+".name", "duplicate record %s (first is gslb.records[%d])", r.Name, first)
			continue
		}
		names[r.Name] = i
		g.Records = append(g.Records, r)
	}
	return g
}

// gslbRecord decodes a record; its Name is empty when it is not usable.
func (d *decoder) gslbRecord(n *yaml.Node, path, zone string) GSLBRecord {
	f := section[GSLBRecord](d, n, path)
	r := GSLBRecord{TTL: defaultGSLBRecord.TTL}
	name, nn := f.str("name", "")
	if nn != nil {
		abs, err := recordName(name, zone)
		if err != nil {
			d.errorf(nn, f.field("name"), "%v", err)
		} else {
			r.Name = abs
		}
	}
	var tn *yaml.Node
	r.TTL, tn = f.duration("ttl", r.TTL)
	if tn != nil && (r.TTL < 0 || r.TTL > maxGSLBTTL || r.TTL%time.Second != 0) {
		d.errorf(tn, f.field("ttl"), "must be whole seconds from 0s to %s, got %s", maxGSLBTTL, r.TTL)
	}
	sn := f.get("sites")
	if sn == nil {
		return r
	}
	items, ok := d.sequence(sn, f.field("sites"), "a list of sites")
	if !ok {
		return r
	}
	if len(items) == 0 {
		d.errorf(sn, f.field("sites"), "must list at least one site")
	}
	seen := map[string]int{}
	for i, item := range items {
		sp := fmt.Sprintf("%s[%d]", f.field("sites"), i)
		s, an := d.gslbSite(item, sp)
		if s.Address == "" {
			continue
		}
		if first, dup := seen[s.Address]; dup {
			d.errorf(an, sp+".address", "duplicate address %s (first is %s[%d])", s.Address, f.field("sites"), first)
			continue
		}
		seen[s.Address] = i
		r.Sites = append(r.Sites, s)
	}
	return r
}

// recordName makes name absolute in zone and reports one outside it.
func recordName(name, zone string) (string, error) {
	if name == "@" {
		return zone, nil
	}
	if _, ok := dns.IsDomainName(name); !ok || name == "" {
		return "", fmt.Errorf("must be a domain name or @, got %q", name)
	}
	abs := name
	if !dns.IsFqdn(name) {
		abs = name + "." + zone
	}
	abs = dns.CanonicalName(abs)
	if zone != "" && !dns.IsSubDomain(zone, abs) {
		return "", fmt.Errorf("%s is outside the zone %s", strings.TrimSuffix(abs, "."), zone)
	}
	return abs, nil
}

func (d *decoder) gslbSite(n *yaml.Node, path string) (GSLBSite, *yaml.Node) {
	f := section[GSLBSite](d, n, path)
	var s GSLBSite
	a, an := f.str("address", "")
	if an != nil {
		ip, err := netip.ParseAddr(a)
		if err != nil || ip.Zone() != "" {
			d.errorf(an, f.field("address"), "must be an IPv4 or IPv6 address, got %q", a)
		} else {
			s.Address = ip.Unmap().String()
		}
	}
	s.Check = d.gslbCheck(f.get("check"), f.field("check"))
	return s, an
}

func (d *decoder) gslbCheck(n *yaml.Node, path string) GSLBCheck {
	f := section[GSLBCheck](d, n, path)
	c := defaultGSLBCheck
	if t, tn := f.str("type", c.Type); tn != nil {
		if t != "http" && t != "tcp" {
			d.errorf(tn, f.field("type"), "must be http or tcp, got %q", t)
		}
		c.Type = t
	}
	if c.Type == "tcp" {
		for _, k := range []string{"path", "host", "status"} {
			if kn := f.get(k); kn != nil {
				d.errorf(kn, f.field(k), "applies only to type: http checks")
			}
		}
		c.Path, c.Status = "", 0
	}
	var pn *yaml.Node
	c.Port, pn = f.integer("port", c.Port)
	if pn != nil && (c.Port < 1 || c.Port > 65535) {
		d.errorf(pn, f.field("port"), "must be from 1 to 65535, got %d", c.Port)
	}
	if p, n := f.str("path", c.Path); n != nil {
		if err := hapword.URI(p); err != nil {
			d.errorf(n, f.field("path"), "%v", err)
		}
		c.Path = p
	}
	if h, n := f.str("host", ""); n != nil {
		if err := checkHostHeader(h); err != nil {
			d.errorf(n, f.field("host"), "%v", err)
		}
		c.Host = h
	}
	var stn *yaml.Node
	c.Status, stn = f.integer("status", c.Status)
	if stn != nil && (c.Status < 100 || c.Status > 599) {
		d.errorf(stn, f.field("status"), "must be an HTTP status from 100 to 599, got %d", c.Status)
	}
	c.Interval = d.within(f, "interval", c.Interval, minGSLBInterval, maxGSLBInterval)
	var ton *yaml.Node
	c.Timeout, ton = f.duration("timeout", c.Interval/2)
	// As gdnsd: a check must end before the next one starts.
	if ton != nil && (c.Timeout <= 0 || c.Timeout >= c.Interval) {
		d.errorf(ton, f.field("timeout"), "must be positive and less than interval (%s), got %s", c.Interval, c.Timeout)
	}
	for _, t := range []struct {
		key string
		v   *int
	}{{"up_thresh", &c.UpThresh}, {"ok_thresh", &c.OKThresh}, {"down_thresh", &c.DownThresh}} {
		v, tn := f.integer(t.key, *t.v)
		if tn != nil && (v < 1 || v > maxGSLBThresh) {
			d.errorf(tn, f.field(t.key), "must be from 1 to %d, got %d", maxGSLBThresh, v)
			continue
		}
		*t.v = v
	}
	return c
}
