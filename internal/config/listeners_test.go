package config

import (
	"errors"
	"fmt"
	"github.com/shoal-lb/shoal/internal/testport"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// listenerKinds are every TCP listener a file can give, in the order of
// listenersDoc, with the field each is reported by.
var listenerKinds = []struct{ token, field string }{
	{"ADDR0", "frontends[0].bind[0]"},
	{"ADDR1", "frontends[1].bind"}, // a scalar bind
	{"ADDR2", "admin.listen"},
	{"ADDR3", "haproxy.prometheus"},
	{"ADDR4", "metrics.listen"},
	{"ADDR5", "gslb.listen[0]"},
	{"ADDR6", "compat.sacloud_autoscaler.listen"},
}

const listenersDoc = `frontends:
  - name: edge
    bind: [ADDR0]
    routes: [{group: web}]
  - name: other
    bind: ADDR1
    routes: [{group: web}]
admin:
  listen: ADDR2
  token: secret-token
haproxy:
  prometheus: ADDR3
metrics:
  listen: ADDR4
gslb:
  listen: [ADDR5]
  zone: example.org
  records: [{name: www, sites: [{address: 192.0.2.1}]}]
compat:
  sacloud_autoscaler: {listen: tcp:ADDR6}
groups:
  - {name: web, min_size: 1, max_size: 1, template: {command: [app]}}
`

// shorthandListenersDoc is listenersDoc with the listen shorthand for the
// frontends.
const shorthandListenersDoc = `listen: ADDR0
admin: {listen: ADDR2, token: secret-token}
haproxy: {prometheus: ADDR3}
metrics: {listen: ADDR4}
gslb:
  listen: [ADDR5]
  zone: example.org
  records: [{name: www, sites: [{address: 192.0.2.1}]}]
compat: {sacloud_autoscaler: {listen: "tcp:ADDR6"}}
groups:
  - {name: web, min_size: 1, max_size: 1, template: {command: [app]}}
`

// fillListeners puts addrs[k] where ADDRk is, and returns each token's
// line and column in the result.
func fillListeners(doc string, addrs []string) (string, map[string][2]int) {
	pos := map[string][2]int{}
	lines := strings.Split(doc, "\n")
	for i, l := range lines {
		for k, kind := range listenerKinds {
			if c := strings.Index(l, kind.token); c >= 0 {
				col := c + 1
				if strings.HasPrefix(l[c-4:], "tcp:") {
					col -= 4 // the node is "tcp:ADDR"
					if l[c-5] == '"' {
						col--
					}
				}
				pos[kind.token] = [2]int{i + 1, col}
				l = strings.Replace(l, kind.token, addrs[k], 1)
			}
		}
		lines[i] = l
	}
	return strings.Join(lines, "\n"), pos
}

// TestListenerPairs: for every two listeners a file can give (each
// frontend's bind, the listen shorthand, admin.listen, haproxy.prometheus,
// metrics.listen, gslb.listen, the sacloud-compat listen), the same address
// in both is refused at the later one with FILE:LINE:COL, naming the
// earlier; with every address different the file is accepted, and every
// address can then be listened on at once, as serve does.
func TestListenerPairs(t *testing.T) {
	for _, doc := range []struct{ name, text string }{{"frontends", listenersDoc}, {"shorthand", shorthandListenersDoc}} {
		var kinds []int
		for k, kind := range listenerKinds {
			if strings.Contains(doc.text, kind.token) {
				kinds = append(kinds, k)
			}
		}
		field := func(k int) string {
			if doc.name == "shorthand" && k == 0 {
				return "listen"
			}
			return listenerKinds[k].field
		}
		addrs := make([]string, len(listenerKinds))
		for k := range addrs {
			addrs[k] = "127.0.0.1:" + strconv.Itoa(20000+k)
		}
		for a, i := range kinds {
			for _, j := range kinds[a+1:] {
				t.Run(fmt.Sprintf("%s/%s=%s", doc.name, field(i), field(j)), func(t *testing.T) {
					same := append([]string(nil), addrs...)
					same[j] = same[i]
					text, pos := fillListeners(doc.text, same)
					_, err := Parse("testdata/shoal.yaml", []byte(text))
					var list ErrorList
					if !errors.As(err, &list) || len(list) != 1 {
						t.Fatalf("Parse = %v; want one error", err)
					}
					pi, pj := pos[listenerKinds[i].token], pos[listenerKinds[j].token]
					want := fmt.Sprintf("testdata/shoal.yaml:%d:%d: %s: %s is already bound by %s (line %d)", pj[0], pj[1], field(j), same[i], field(i), pi[0])
					if got := list[0].Error(); got != want {
						t.Errorf("got  %s\nwant %s", got, want)
					}
				})
			}
		}
		t.Run(doc.name+"/all different", func(t *testing.T) {
			free := make([]string, len(listenerKinds))
			for k := range free {
				free[k] = freeAddr(t)
			}
			text, _ := fillListeners(doc.text, free)
			if _, err := Parse("testdata/shoal.yaml", []byte(text)); err != nil {
				t.Fatalf("Parse: %v", err)
			}
			var open []func() error
			defer func() {
				for _, c := range open {
					c()
				}
			}()
			for _, k := range kinds {
				l, err := net.Listen("tcp", free[k])
				if err != nil {
					t.Fatalf("%s: accepted, but %v", field(k), err)
				}
				open = append(open, l.Close)
			}
		})
	}
}

// freeAddr is a loopback address with a port no one listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	return "127.0.0.1:" + strconv.Itoa(freePort(t))
}

// TestListenerAddressForms: which two hosts of one port collide, as the
// check says and as the kernel does: the check's verdict must be the
// kernel's, so that what validate accepts serve can open, and the other
// way round. HAProxy's empty host is every IPv4 address; Go's, every
// address of both families. The listeners are opened for an instant,
// nothing connects to them.
func TestListenerAddressForms(t *testing.T) {
	const haproxy, shoal = byHAProxy, byShoal
	tests := []struct {
		a      string
		aBy    int
		b      string
		bBy    int
		expect bool
	}{
		{"127.0.0.1", haproxy, "127.0.0.1", shoal, true},
		{"127.0.0.1", haproxy, "127.0.0.2", shoal, false},
		{"0.0.0.0", haproxy, "127.0.0.1", shoal, true},
		{"127.0.0.1", shoal, "0.0.0.0", haproxy, true},
		{"", haproxy, "127.0.0.1", shoal, true},
		{"", haproxy, "::1", shoal, false},
		{"", shoal, "::1", haproxy, true},
		{"", shoal, "127.0.0.1", haproxy, true},
		{"::", haproxy, "127.0.0.1", shoal, true},
		{"::", shoal, "::1", haproxy, true},
		{"::1", haproxy, "127.0.0.1", shoal, false},
		{"::1", haproxy, "0:0:0:0:0:0:0:1", shoal, true},
		{"::ffff:127.0.0.1", shoal, "127.0.0.1", shoal, true},
		{"localhost", haproxy, "127.0.0.1", shoal, true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q=%q", tt.a, tt.b), func(t *testing.T) {
			port := strconv.Itoa(freePort(t))
			a := listenerAt{host: tt.a, port: port, by: tt.aBy}
			b := listenerAt{host: tt.b, port: port, by: tt.bBy}
			if got := b.collides(a); got != tt.expect || a.collides(b) != got {
				t.Errorf("collides = %v (and %v the other way), want %v", got, a.collides(b), tt.expect)
			}
			la, err := listenAs(a)
			if err != nil {
				t.Fatalf("listen on %s: %v", tt.a, err)
			}
			defer la.Close()
			lb, err := listenAs(b)
			if err == nil {
				lb.Close()
			}
			if kernel := errors.Is(err, syscall.EADDRINUSE); kernel != tt.expect {
				t.Errorf("the kernel says in use = %v (%v), the check %v", kernel, err, tt.expect)
			}
		})
	}
}

// listenAs opens l as its owner would: HAProxy's empty host as 0.0.0.0.
func listenAs(l listenerAt) (net.Listener, error) {
	host := l.host
	if host == "" && l.by == byHAProxy {
		return net.Listen("tcp4", net.JoinHostPort("0.0.0.0", l.port))
	}
	return net.Listen("tcp", net.JoinHostPort(host, l.port))
}

func freePort(t *testing.T) int {
	t.Helper()
	return testport.Free(t)
}

// TestListenerSockets: the sacloud-compat server's unix socket cannot be
// admin.socket, written or by default.
func TestListenerSockets(t *testing.T) {
	const groups = "groups:\n  - {name: web, min_size: 1, max_size: 1, template: {command: [app]}}\n"
	for _, tt := range []struct{ doc, want string }{
		{"listen: 127.0.0.1:8080\nstate_dir: /tmp/st\nadmin: {socket: api.sock}\ncompat: {sacloud_autoscaler: {listen: \"unix:/tmp/st/api.sock\"}}\n" + groups,
			`testdata/shoal.yaml:4:39: compat.sacloud_autoscaler.listen: /tmp/st/api.sock is already bound by admin.socket (line 3)`},
		{"listen: 127.0.0.1:8080\nstate_dir: /tmp/st\ncompat: {sacloud_autoscaler: {listen: \"unix:shoal.sock\"}}\n" + groups,
			`testdata/shoal.yaml:3:39: compat.sacloud_autoscaler.listen: /tmp/st/shoal.sock is already taken by admin.socket (its default, /tmp/st/shoal.sock)`},
	} {
		_, err := Parse("testdata/shoal.yaml", []byte(tt.doc))
		if err == nil || err.Error() != tt.want {
			t.Errorf("Parse:\n got %v\nwant %s", err, tt.want)
		}
	}
}
