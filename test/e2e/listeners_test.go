package e2e

import (
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// TestListenersValidateServe: what validate accepts serve runs, and what
// serve cannot open validate refuses. A file with every listener shoal and
// its HAProxy open (the frontend, admin.listen, haproxy.prometheus,
// metrics.listen, gslb.listen, the sacloud-compat listen) on different
// ports passes validate, and serve opens every one of them; the same file
// with metrics.listen on the frontend's address is refused by validate
// and by serve alike, before anything starts, at the field's line.
func TestListenersValidateServe(t *testing.T) {
	t.Parallel() // one instance, no load
	addr := func() string { return fmt.Sprintf("127.0.0.1:%d", freePort(t)) }
	admin, prom, metrics, dns, sacloud := addr(), addr(), addr(), addr(), addr()
	top := func(metrics string) string {
		return fmt.Sprintf(`admin: {listen: %s, token: e2e-token}
metrics: {listen: %s}
gslb:
  listen: [%s]
  zone: example.org
  records: [{name: www, sites: [{address: 127.0.0.1, check: {type: tcp, port: 1}}]}]
compat: {sacloud_autoscaler: {listen: "tcp:%s"}}
`, admin, metrics, dns, sacloud)
	}
	e := newEnv(t, top(e2eClash), groupSpec{Name: "web", Min: 1, Max: 1})
	withProm := func() {
		b, err := os.ReadFile(e.cfgPath)
		if err != nil {
			t.Fatal(err)
		}
		text := strings.Replace(string(b), "haproxy:\n", "haproxy:\n  prometheus: "+prom+"\n", 1)
		text = strings.Replace(text, e2eClash, e.listen, 1)
		if err := os.WriteFile(e.cfgPath, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	withProm()
	b, _ := os.ReadFile(e.cfgPath)
	line := 1 + strings.Count(string(b[:strings.Index(string(b), "metrics: {listen:")]), "\n")
	want := fmt.Sprintf("shoal.yaml:%d:19: metrics.listen: %s is already bound by listen (line 1)", line, e.listen)
	for _, cmd := range []string{"validate", "serve"} {
		out, stderr, code := e.cliWithin(time.Minute, cmd)
		if code != 2 || !strings.Contains(stderr, want) {
			t.Errorf("shoal %s with metrics.listen on the frontend's address: exit %d, want 2 and %q:\n%s%s", cmd, code, want, out, stderr)
		}
	}
	if pids := e.ourProcesses(); len(pids) > 0 {
		t.Errorf("the refused serve left processes: %v", pids)
	}

	e.writeConfig(top(metrics), groupSpec{Name: "web", Min: 1, Max: 1})
	withProm()
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

// e2eClash stands for the frontend's address until the env has one.
const e2eClash = "CLASH"
