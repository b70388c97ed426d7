package keepalived

import (
	"context"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
)

func TestScriptLine(t *testing.T) {
	got, err := scriptLine([]string{"/usr/local/bin/shoal", "ha", "check", "--socket", "/var/lib/my shoal/admin#1!{x}.sock"})
	if err != nil {
		t.Fatal(err)
	}
	want := `"'/usr/local/bin/shoal' 'ha' 'check' '--socket' '/var/lib/my shoal/admin#1!{x}.sock'"`
	if got != want {
		t.Fatalf("scriptLine = %s, want %s", got, want)
	}
	for _, bad := range []string{"", "it's", `a"b`, `a\b`, "$HOME", "a\nb", "a\tb"} {
		if _, err := scriptLine([]string{"/bin/true", bad}); err == nil || !strings.Contains(err.Error(), "keepalived cannot be given") {
			t.Errorf("scriptLine(%q) = %v, want a refusal", bad, err)
		}
	}
}

func TestAdvert(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		text string
		v3   bool
	}{{time.Second, "1", false}, {3 * time.Second, "3", false}, {500 * time.Millisecond, "0.5", true}, {1500 * time.Millisecond, "1.5", true}} {
		if text, v3 := advert(c.d); text != c.text || v3 != c.v3 {
			t.Errorf("advert(%s) = %s, %v; want %s, %v", c.d, text, v3, c.text, c.v3)
		}
	}
}

// iface returns a multicast interface of this machine: keepalived -t checks
// that the configured interface exists and, without unicast peers, that it
// does multicast.
func iface(t *testing.T) string {
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range ifs {
		if i.Flags&net.FlagLoopback == 0 && i.Flags&net.FlagMulticast != 0 && len(i.Name) <= 15 && plain.MatchString(i.Name) {
			return i.Name
		}
	}
	t.Skip("no multicast interface for keepalived -t")
	return ""
}

// keepalivedBin finds keepalived, skipping without it unless in CI.
func keepalivedBin(t *testing.T) string {
	bin, err := binary("", "keepalived")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err, " (make test-deps)")
	}
	return bin
}

// TestRenderAccepted renders configurations (multicast and unicast, whole
// and fractional advert, with and without track scripts) and has
// keepalived check each (keepalived -t): what shoal writes is what
// keepalived reads.
func TestRenderAccepted(t *testing.T) {
	bin := keepalivedBin(t)
	dev := iface(t)
	dir := t.TempDir()
	vip := netip.MustParsePrefix("10.98.250.100/24")
	check := []string{"/usr/bin/test", "-e", filepath.Join(dir, "health ok")}
	leader := []string{"/usr/bin/test", "-e", filepath.Join(dir, "leader")}
	for name, o := range map[string]Options{
		"multicast": {VIP: config.HAVIP{Address: vip.String(), Interface: dev, RouterID: 51, Advert: time.Second}, Priority: 100, Node: "a", Check: check, LeaderCheck: leader},
		"unicast":   {VIP: config.HAVIP{Address: vip.String(), Interface: dev, RouterID: 7, Advert: 2 * time.Second, UnicastPeers: []string{"10.98.250.2", "10.98.250.3"}}, Priority: 254, Node: "node-b", Check: check, LeaderCheck: leader},
		"fraction":  {VIP: config.HAVIP{Address: vip.String(), Interface: dev, RouterID: 255, Advert: 500 * time.Millisecond}, Priority: 1, Node: "c", Check: check},
		"no-checks": {VIP: config.HAVIP{Address: "fd00::100/64", Interface: dev, RouterID: 1, Advert: time.Second}, Priority: 10, Node: "d"},
	} {
		t.Run(name, func(t *testing.T) {
			p := netip.MustParsePrefix(o.VIP.Address)
			text, err := render(o, p, filepath.Join(dir, fifoFile))
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"script_user root", "enable_script_security", "state BACKUP",
				"interface " + dev, "priority " + strconv.Itoa(o.Priority), p.String() + " dev " + dev} {
				if !strings.Contains(text, want) {
					t.Errorf("config lacks %q:\n%s", want, text)
				}
			}
			if len(o.LeaderCheck) > 0 && !strings.Contains(text, "weight 50") {
				t.Errorf("leader script without weight 50:\n%s", text)
			}
			if o.VIP.Advert%time.Second != 0 && !strings.Contains(text, "version 3") {
				t.Errorf("fractional advert without VRRPv3:\n%s", text)
			}
			conf := filepath.Join(t.TempDir(), confFile)
			if err := writeFileAtomic(conf, []byte(text)); err != nil {
				t.Fatal(err)
			}
			if fi, err := os.Stat(conf); err != nil || fi.Mode().Perm() != 0o600 {
				t.Fatalf("config mode: %v %v", fi.Mode(), err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if out, err := exec.CommandContext(ctx, bin, "--config-test", "--use-file", conf).CombinedOutput(); err != nil {
				t.Fatalf("keepalived -t: %v: %s\n%s", err, out, text)
			}
		})
	}
}

func TestRenderRefuses(t *testing.T) {
	vip := netip.MustParsePrefix("10.98.250.100/24")
	good := Options{VIP: config.HAVIP{Address: vip.String(), Interface: "eth0", RouterID: 51, Advert: time.Second}, Priority: 100, Node: "a"}
	for _, c := range []struct {
		name string
		edit func(*Options)
		fifo string
		want string
	}{
		{"interface", func(o *Options) { o.VIP.Interface = "eth0 }" }, "", "not an interface name"},
		{"node", func(o *Options) { o.Node = "a#b" }, "", "node name"},
		{"priority", func(o *Options) { o.Priority = 255 }, "", "expected 1..254"},
		{"router id", func(o *Options) { o.VIP.RouterID = 0 }, "", "expected 1..255"},
		{"advert", func(o *Options) { o.VIP.Advert = time.Millisecond }, "", "expected 10ms..255s"},
		{"peer", func(o *Options) { o.VIP.UnicastPeers = []string{"10.0.0.2 }"} }, "", "expected an IP address"},
		{"peer family", func(o *Options) { o.VIP.UnicastPeers = []string{"fd00::2"} }, "", "address family"},
		{"script", func(o *Options) { o.Check = []string{"/bin/true", "$x"} }, "", "shoal_health script"},
		{"dir", func(*Options) {}, "/var/lib/my shoal/notify.fifo", "state directory"},
	} {
		o := good
		c.edit(&o)
		fifo := c.fifo
		if fifo == "" {
			fifo = "/var/lib/shoal/keepalived/notify.fifo"
		}
		if _, err := render(o, vip, fifo); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: render = %v, want an error with %q", c.name, err, c.want)
		}
	}
}

// TestCheckSecure follows keepalived's rule for root's scripts: a script
// in a directory others may write is refused, one in a sticky directory
// (as /tmp) or a private one is not.
func TestCheckSecure(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the files must be root's")
	}
	dir := t.TempDir()
	for _, sub := range []string{"open", "sticky", "private"} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, sub, "check"), []byte("#!/bin/sh\n"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "open"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "sticky"), 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	if err := checkSecure(filepath.Join(dir, "open", "check")); err == nil || !strings.Contains(err.Error(), "mode -rwxrwxrwx") {
		t.Errorf("script in a world-writable directory: %v, want a refusal naming the mode", err)
	}
	for _, ok := range []string{"sticky", "private"} {
		if err := checkSecure(filepath.Join(dir, ok, "check")); err != nil {
			t.Errorf("script in the %s directory: %v", ok, err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "private", "check"), 0o722); err != nil {
		t.Fatal(err)
	}
	if err := checkSecure(filepath.Join(dir, "private", "check")); err == nil {
		t.Error("a group- and world-writable script was accepted")
	}
}
