package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestGSLBServe runs `shoal serve` with a gslb section over two sites:
// shoal's own frontend (127.0.0.1, through HAProxy to the group) and another
// HTTP site on 127.0.0.2. The other site dies: the DNS answer drops it within
// interval × down_thresh, the change is logged and counted in /metrics.
func TestGSLBServe(t *testing.T) {
	parallel(t)
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	other := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	other.Listener.Close()
	other.Listener = ln
	other.Start()
	defer other.Close()

	spec := groupSpec{Name: "web", Min: 1, Max: 1}
	e := newEnv(t, "", spec)
	_, frontPort, _ := net.SplitHostPort(e.listen)
	_, otherPort, _ := net.SplitHostPort(ln.Addr().String())
	dnsAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	const check = "path: /healthz, interval: 300ms, timeout: 200ms, up_thresh: 2, ok_thresh: 2, down_thresh: 2"
	e.writeConfig(fmt.Sprintf(`metrics:
  listen: %s
gslb:
  listen: [%s]
  zone: example.org
  records:
    - name: www
      ttl: 5s
      sites:
        - {address: 127.0.0.1, check: {port: %s, %s}}
        - {address: 127.0.0.2, check: {port: %s, %s}}
`, metricsAddr, dnsAddr, frontPort, check, otherPort, check), spec)
	e.start()
	e.waitInService("web", 1)

	answer := func() []string {
		m := new(dns.Msg)
		m.SetQuestion("www.example.org.", dns.TypeA)
		r, err := dns.Exchange(m, dnsAddr)
		if err != nil {
			return []string{err.Error()}
		}
		var got []string
		for _, rr := range r.Answer {
			if a, ok := rr.(*dns.A); ok {
				got = append(got, a.A.String())
			}
		}
		slices.Sort(got)
		return got
	}
	// Through HAProxy, the frontend passes once the instance is in service.
	e.eventually("both sites answered", 20*time.Second, func() error {
		if got := answer(); !slices.Equal(got, []string{"127.0.0.1", "127.0.0.2"}) {
			return fmt.Errorf("answer %v", got)
		}
		return nil
	})

	other.Close()
	start := time.Now()
	e.eventually("the dead site dropped", 10*time.Second, func() error {
		if got := answer(); !slices.Equal(got, []string{"127.0.0.1"}) {
			return fmt.Errorf("answer %v", got)
		}
		return nil
	})
	took := time.Since(start)
	t.Logf("dropped after %s (interval × down_thresh = 600ms)", took)
	// The bound plus the poll of eventually and a loaded machine's slack.
	if took > 1500*time.Millisecond {
		t.Errorf("dropped after %s, want about 600ms", took)
	}
	_, body := httpGet(t, "http://"+metricsAddr+"/metrics", "")
	for _, want := range []string{
		`shoal_gslb_site_transitions_total{address="127.0.0.2",record="www.example.org.",state="down"} 1`,
		`shoal_gslb_site_up{address="127.0.0.2",record="www.example.org."} 0`,
		`shoal_gslb_site_up{address="127.0.0.1",record="www.example.org."} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	checkMetricsReference(t, body)
	if !regexp.MustCompile(`gslb site state changed.*address=127.0.0.2.*from=up.*to=down`).MatchString(e.log.String()) {
		t.Errorf("no state change logged:\n%s", e.log)
	}
}

// TestGSLBOnly: a node that only answers DNS (a gslb section, no groups)
// validates and serves: its record answers with the site while the site's
// check passes. (It used to need a dummy group: "groups: required".)
func TestGSLBOnly(t *testing.T) {
	parallel(t)
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	defer site.Close()
	_, port, _ := net.SplitHostPort(site.Listener.Addr().String())
	dnsAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	e := newEnv(t, fmt.Sprintf(`gslb:
  listen: [%s]
  zone: example.org
  records:
    - name: www
      ttl: 5s
      sites:
        - {address: 127.0.0.1, check: {port: %s, path: /, interval: 300ms, timeout: 200ms}}
`, dnsAddr, port))
	if out, stderr, code := e.cli("validate"); code != 0 || !strings.Contains(out, "0 group(s)") {
		t.Fatalf("shoal validate of a GSLB-only config exited %d:\n%s%s", code, out, stderr)
	}
	e.start()
	e.eventually("the site answered", 20*time.Second, func() error {
		m := new(dns.Msg)
		m.SetQuestion("www.example.org.", dns.TypeA)
		r, err := dns.Exchange(m, dnsAddr)
		if err != nil {
			return err
		}
		if len(r.Answer) != 1 {
			return fmt.Errorf("answer %v", r.Answer)
		}
		if a, ok := r.Answer[0].(*dns.A); !ok || a.A.String() != "127.0.0.1" {
			return fmt.Errorf("answer %v", r.Answer)
		}
		return nil
	})
	if out, stderr, code := e.cli("status"); code != 0 {
		t.Fatalf("shoal status on a GSLB-only node exited %d:\n%s%s", code, out, stderr)
	}
	e.stop()
}
