package e2e

import (
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// TestListenersValidateServe: what validate accepts serve runs. A file with
// every listener shoal and its HAProxy open (the frontend, admin.listen,
// haproxy.prometheus, metrics.listen, gslb.listen, the sacloud-compat
// listen), each on its own port, passes validate, and serve opens every one
// of them. (TestValidateRefusesWhatServeRefuses has each on the
// frontend's address, refused by both.)
func TestListenersValidateServe(t *testing.T) {
	parallel(t) // one instance, no load
	addr := func() string { return fmt.Sprintf("127.0.0.1:%d", freePort(t)) }
	admin, prom, metrics, dns, sacloud := addr(), addr(), addr(), addr(), addr()
	e := newEnv(t, fmt.Sprintf(`admin: {listen: %s, token: e2e-token}
metrics: {listen: %s}
gslb:
  listen: [%s]
  zone: example.org
  records: [{name: www, sites: [{address: 127.0.0.1, check: {type: tcp, port: 1}}]}]
compat: {sacloud_autoscaler: {listen: "tcp:%s"}}
`, admin, metrics, dns, sacloud), groupSpec{Name: "web", Min: 1, Max: 1})
	b, err := os.ReadFile(e.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(b), "haproxy:\n", "haproxy:\n  prometheus: "+prom+"\n", 1)
	if err := os.WriteFile(e.cfgPath, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, stderr, code := e.cli("validate"); code != 0 {
		t.Fatalf("validate with every listener apart: exit %d:\n%s%s", code, out, stderr)
	}
	e.start()
	for name, a := range map[string]string{"listen": e.listen, "admin.listen": admin, "haproxy.prometheus": prom,
		"metrics.listen": metrics, "gslb.listen": dns, "sacloud_autoscaler.listen": sacloud} {
		c, err := net.DialTimeout("tcp", a, 5*time.Second)
		if err != nil {
			t.Errorf("%s (%s): %v", name, a, err)
			continue
		}
		c.Close()
	}
}
