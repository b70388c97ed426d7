package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const haDoc = `listen: :8080
ha:
  node: a
  cluster: prod-1
  priority: 100
  lease: 3s
  etcd:
    endpoints: ["http://10.99.0.1:2379", "https://[::1]:2379"]
    dial_timeout: 2s
    ca_file: tls/cert.pem
    cert_file: tls/cert.pem
    key_file: tls/key.pem
  vip:
    address: 10.99.0.100/24
    interface: eth0
    router_id: 7
    advert: 500ms
    unicast_peers: [10.99.0.12]
` + minimalGroups

func TestParseHA(t *testing.T) {
	cfg, err := Parse("testdata/shoal.yaml", []byte(haDoc))
	if err != nil {
		t.Fatal(err)
	}
	h := cfg.HA
	if h == nil || h.Node != "a" || h.Cluster != "prod-1" || h.Priority != 100 || h.Lease != 3*time.Second {
		t.Fatalf("ha = %+v", h)
	}
	if h.EtcdPrefix() != "/shoal/prod-1/" {
		t.Errorf("prefix = %q", h.EtcdPrefix())
	}
	e := h.Etcd
	if len(e.Endpoints) != 2 || e.DialTimeout != 2*time.Second || !filepath.IsAbs(e.CAFile) || !strings.HasSuffix(e.KeyFile, "testdata/tls/key.pem") {
		t.Errorf("etcd = %+v", e)
	}
	v := h.VIP
	if v == nil || v.Address != "10.99.0.100/24" || v.Interface != "eth0" || v.RouterID != 7 || v.Advert != 500*time.Millisecond || len(v.UnicastPeers) != 1 || v.Keepalived != "keepalived" {
		t.Errorf("vip = %+v", v)
	}

	// Without ha, a single node; with only the required keys, the defaults.
	cfg, err = Parse("shoal.yaml", []byte("listen: :8080\n"+minimalGroups))
	if err != nil || cfg.HA != nil {
		t.Fatalf("no ha: %v, %+v", err, cfg.HA)
	}
	cfg, err = Parse("shoal.yaml", []byte("listen: :8080\nha: {node: b, priority: 1, etcd: {endpoints: [\"http://127.0.0.1:2379\"]}}\n"+minimalGroups))
	if err != nil {
		t.Fatal(err)
	}
	if h := cfg.HA; h.Lease != 2*time.Second || h.Cluster != "shoal" || h.Etcd.DialTimeout != 3*time.Second || h.VIP != nil {
		t.Errorf("defaults: %+v", h)
	}
}

func TestParseHAPasswordFile(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	doc := "listen: :8080\nha: {node: b, priority: 1, etcd: {endpoints: [\"http://127.0.0.1:2379\"], username: shoal, password_file: " + pw + "}}\n" + minimalGroups
	cfg, err := Parse("shoal.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HA.Etcd.Username != "shoal" || cfg.HA.Etcd.PasswordFile != pw {
		t.Errorf("etcd = %+v", cfg.HA.Etcd)
	}
	err = parseEdited(t, doc, "password_file: "+pw, "password_file: "+dir)
	if want := "ha.etcd.password_file: must be a readable file: " + dir + " is not a regular file"; !strings.Contains(err.Error(), want) {
		t.Errorf("error =\n%v\nwant %s", err, want)
	}
}

func TestParseHAErrors(t *testing.T) {
	tests := []struct{ old, new, want string }{
		{`"http://10.99.0.1:2379"`, `"10.99.0.1:2379"`, `testdata/shoal.yaml:8:17: ha.etcd.endpoints[0]: must be http://host:port or https://host:port, got "10.99.0.1:2379"`},
		{`"http://10.99.0.1:2379"`, `"http://10.99.0.1"`, `testdata/shoal.yaml:8:17: ha.etcd.endpoints[0]: must be http(s)://host:port with a host and a port, got "http://10.99.0.1"`},
		{`endpoints: ["http://10.99.0.1:2379", "https://[::1]:2379"]`, `endpoints: []`, `testdata/shoal.yaml:8:16: ha.etcd.endpoints: must list at least one http(s)://host:port`},
		{"priority: 100", "priority: 255", "testdata/shoal.yaml:5:13: ha.priority: must be from 1 to 254, got 255"},
		{"priority: 100", "priority: 0", "testdata/shoal.yaml:5:13: ha.priority: must be from 1 to 254, got 0"},
		{"  priority: 100\n", "", "testdata/shoal.yaml:3:3: ha.priority: required"},
		{"lease: 3s", "lease: 2500ms", "testdata/shoal.yaml:6:10: ha.lease: must be whole seconds from 2s to 1m0s, got 2.5s"},
		{"lease: 3s", "lease: 1s", "testdata/shoal.yaml:6:10: ha.lease: must be whole seconds from 2s to 1m0s, got 1s"},
		{"node: a", "node: A_1", `testdata/shoal.yaml:3:9: ha.node: must be 1 to 32 of a-z, 0-9 and -, got "A_1"`},
		{"cluster: prod-1", "cluster: prod/1", `testdata/shoal.yaml:4:12: ha.cluster: must be 1 to 32 of a-z, 0-9 and -, got "prod/1"`},
		{"address: 10.99.0.100/24", "address: 10.99.0.100", `testdata/shoal.yaml:14:14: ha.vip.address: must be an address with its prefix length (CIDR), such as 10.0.0.100/24, got "10.99.0.100"`},
		{"router_id: 7", "router_id: 256", "testdata/shoal.yaml:16:16: ha.vip.router_id: must be from 1 to 255, got 256"},
		{"router_id: 7", "router_id: 0", "testdata/shoal.yaml:16:16: ha.vip.router_id: must be from 1 to 255, got 0"},
		{"    interface: eth0\n", "", "testdata/shoal.yaml:14:5: ha.vip.interface: required"},
		{"interface: eth0", "interface: eth0/1", `testdata/shoal.yaml:15:16: ha.vip.interface: must be a network interface name (1 to 15 characters, no /, : or spaces), got "eth0/1"`},
		{"advert: 500ms", "advert: 5ms", "testdata/shoal.yaml:17:13: ha.vip.advert: must be a multiple of 10ms from 10ms to 4m15s, got 5ms"},
		{"unicast_peers: [10.99.0.12]", "unicast_peers: [node-b]", `testdata/shoal.yaml:18:21: ha.vip.unicast_peers[0]: must be an IPv4 or IPv6 address, got "node-b"`},
		{"ca_file: tls/cert.pem", "ca_file: tls/missing.pem", "testdata/shoal.yaml:10:14: ha.etcd.ca_file: must be a readable file: stat "},
		{"    key_file: tls/key.pem\n", "", "testdata/shoal.yaml:11:16: ha.etcd.cert_file: needs key_file too"},
		{"    key_file: tls/key.pem\n", "    username: shoal\n", "testdata/shoal.yaml:12:15: ha.etcd.username: needs password_file too"},
		{"dial_timeout: 2s", "dial_timeout: 0s", "testdata/shoal.yaml:9:19: ha.etcd.dial_timeout: must be at least 100ms and at most 1m0s, got 0s"},
		{"  etcd:\n", "  etc:\n", "testdata/shoal.yaml:7:3: ha.etc: unknown field; allowed: node, cluster, priority, lease, etcd, vip"},
	}
	for _, tt := range tests {
		t.Run(tt.new, func(t *testing.T) {
			err := parseEdited(t, haDoc, tt.old, tt.new)
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error =\n%v\nwant\n%s", err, tt.want)
			}
		})
	}
}
