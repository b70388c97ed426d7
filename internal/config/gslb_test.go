package config

import (
	"strings"
	"testing"
	"time"
)

const gslbDoc = `listen: :8080
gslb:
  listen: [127.0.0.1:5353, "[::1]:5353"]
  zone: Example.ORG
  records:
    - name: www
      ttl: 10s
      sites:
        - address: 192.0.2.1
          check: {port: 8080, path: /health, interval: 1s, timeout: 500ms, up_thresh: 3, ok_thresh: 2, down_thresh: 2}
        - address: 2001:DB8::1
          check: {type: tcp, port: 443, interval: 4s}
    - name: api.example.org.
      sites: [{address: 192.0.2.2}]
` + minimalGroups

func TestParseGSLB(t *testing.T) {
	cfg, err := Parse("shoal.yaml", []byte(gslbDoc))
	if err != nil {
		t.Fatal(err)
	}
	g := cfg.GSLB
	if g == nil || g.Zone != "example.org." || len(g.Listen) != 2 || len(g.Records) != 2 {
		t.Fatalf("gslb = %+v", g)
	}
	www, api := g.Records[0], g.Records[1]
	if www.Name != "www.example.org." || www.TTL != 10*time.Second || api.Name != "api.example.org." || api.TTL != defaultGSLBRecord.TTL {
		t.Errorf("records = %+v", g.Records)
	}
	c := www.Sites[0].Check
	if c.Type != "http" || c.Port != 8080 || c.Path != "/health" || c.Status != 200 || c.Interval != time.Second || c.Timeout != 500*time.Millisecond || c.UpThresh != 3 || c.OKThresh != 2 || c.DownThresh != 2 {
		t.Errorf("check = %+v", c)
	}
	if s := www.Sites[1]; s.Address != "2001:db8::1" || s.Check.Type != "tcp" || s.Check.Path != "" || s.Check.UpThresh != defaultGSLBCheck.UpThresh || s.Check.Timeout != 2*time.Second {
		t.Errorf("v6 site = %+v", s)
	}
}

func TestParseGSLBErrors(t *testing.T) {
	tests := []struct{ old, new, want string }{
		{"name: api.example.org.", "name: api.example.com.", "shoal.yaml:13:13: gslb.records[1].name: api.example.com is outside the zone example.org."},
		{"name: www", "name: www..x", `shoal.yaml:6:13: gslb.records[0].name: must be a domain name or @, got "www..x"`},
		{"up_thresh: 3", "up_thresh: 0", "shoal.yaml:10:87: gslb.records[0].sites[0].check.up_thresh: must be from 1 to 65535, got 0"},
		{"down_thresh: 2", "down_thresh: 70000", "shoal.yaml:10:117: gslb.records[0].sites[0].check.down_thresh: must be from 1 to 65535, got 70000"},
		{"timeout: 500ms", "timeout: 1s", "shoal.yaml:10:69: gslb.records[0].sites[0].check.timeout: must be positive and less than interval (1s), got 1s"},
		{"address: 192.0.2.1", "address: 192.0.2.300", `shoal.yaml:9:20: gslb.records[0].sites[0].address: must be an IPv4 or IPv6 address, got "192.0.2.300"`},
		{"address: 192.0.2.2", "address: 192.0.2.1, check: {type: tcp, path: /}", "shoal.yaml:14:61: gslb.records[1].sites[0].check.path: applies only to type: http checks"},
		{"127.0.0.1:5353", "127.0.0.1", `shoal.yaml:3:12: gslb.listen[0]: must be host:port, got "127.0.0.1"`},
		{"zone: Example.ORG", "zone: a..b", `shoal.yaml:4:9: gslb.zone: must be a domain name, got "a..b"`},
		{"ttl: 10s", "ttl: 1500ms", "shoal.yaml:7:12: gslb.records[0].ttl: must be whole seconds from 0s to 168h0m0s, got 1.5s"},
		{"- name: api.example.org.", "- name: www", "shoal.yaml:13:13: gslb.records[1].name: duplicate record www.example.org. (first is gslb.records[0])"},
	}
	for _, tt := range tests {
		t.Run(tt.new, func(t *testing.T) {
			err := parseEdited(t, gslbDoc, tt.old, tt.new)
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error =\n%v\nwant\n%s", err, tt.want)
			}
		})
	}
}
