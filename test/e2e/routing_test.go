package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// useFrontends replaces the env's listen shorthand with a frontends
// section (YAML at the top level).
func (e *shoalEnv) useFrontends(yaml string) {
	e.t.Helper()
	b, err := os.ReadFile(e.cfgPath)
	if err != nil {
		e.t.Fatal(err)
	}
	listen := "listen: " + e.listen + "\n"
	if !strings.Contains(string(b), listen) {
		e.t.Fatalf("config has no %q", listen)
	}
	if err := os.WriteFile(e.cfgPath, []byte(strings.Replace(string(b), listen, yaml, 1)), 0o600); err != nil {
		e.t.Fatal(err)
	}
}

// maintenanceBody has what haproxy.cfg reads as syntax: quotes, '$', '#',
// a backslash, '%' and a newline.
const maintenanceBody = "<h1>\"Back\" soon</h1>\n$HOME # not a comment \\ 100%\n"

// TestRouting: a routing table with every kind of condition and action,
// rendered into HAProxy's ACLs, routes real requests (first match wins),
// weights split 10,000 requests 95/5 within ±2 %, and a TCP frontend
// passes bytes to its group.
func TestRouting(t *testing.T) {
	parallel(t)
	e := newEnv(t, "",
		groupSpec{Name: "web", Min: 1, Max: 1}, groupSpec{Name: "canary", Min: 1, Max: 1},
		groupSpec{Name: "api", Min: 1, Max: 1}, groupSpec{Name: "db", Min: 1, Max: 1})
	_, port, _ := net.SplitHostPort(e.listen)
	v6 := "[::1]:" + port
	tcpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	e.useFrontends(fmt.Sprintf(`frontends:
  - name: edge
    bind: [%s, %q]
    routes:
      - {host: "*.api.test", group: api}
      - {path_regex: '^/v[0-9]+/items/\d+$', group: api}
      - {method: DELETE, group: api}
      - {header: {X-Canary: always}, group: canary}
      - {host: old.test, redirect: {code: 301, location: "https://new.test/a%%20b"}}
      - {path_prefix: /secure, redirect: {https: true}}
      - {path_prefix: /maintenance, respond: {status: 503, content_type: "text/html; charset=utf-8", body: %q}}
      - {weights: {web: 95, canary: 5}}
  - name: raw
    mode: tcp
    bind: [%s]
    routes: [{group: db}]
`, e.listen, v6, maintenanceBody, tcpAddr))
	if out, stderr, code := e.cli("validate", "-c", e.cfgPath); code != 0 {
		t.Fatalf("validate: %d\n%s%s", code, out, stderr)
	}
	e.start()
	for _, g := range []string{"web", "canary", "api", "db"} {
		e.waitInService(g, 1)
	}

	client := &http.Client{
		Timeout:       5 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport:     &http.Transport{MaxIdleConnsPerHost: 16},
	}
	defer client.CloseIdleConnections()
	do := func(method, addr, path, host string, hdr ...string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+addr+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if host != "" {
			req.Host = host
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s (Host %s): %v", method, path, host, err)
		}
		return resp
	}
	group := func(resp *http.Response) string {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		g, _, _ := strings.Cut(resp.Header.Get("X-Instance"), "-")
		return g
	}
	for _, c := range []struct {
		what, method, path, host string
		hdr                      []string
		want                     string
	}{
		{"wildcard host", "GET", "/", "a.api.test", nil, "api"},
		{"wildcard host with a port", "GET", "/", "b.a.api.test:" + port, nil, "api"},
		{"wildcard host first, before respond", "GET", "/maintenance", "a.api.test", nil, "api"},
		{"regex", "GET", "/v2/items/42", "", nil, "api"},
		{"method", "DELETE", "/thing", "", nil, "api"},
		{"header", "GET", "/", "", []string{"X-Canary", "always"}, "canary"},
	} {
		for range 10 {
			if got := group(do(c.method, e.listen, c.path, c.host, c.hdr...)); got != c.want {
				t.Fatalf("%s: %s %s (Host %q) went to %q, want %s", c.what, c.method, c.path, c.host, got, c.want)
			}
		}
	}
	// Near misses fall through to the weighted catch-all.
	for _, c := range []struct{ what, method, path, host string }{
		{"the wildcard's own domain", "GET", "/", "api.test"},
		{"a regex miss", "GET", "/v2/items/4x", ""},
		{"another method", "POST", "/thing", ""},
	} {
		if got := group(do(c.method, e.listen, c.path, c.host)); got != "web" && got != "canary" {
			t.Errorf("%s: %s %s (Host %q) went to %q, want the weighted web or canary", c.what, c.method, c.path, c.host, got)
		}
	}

	resp := do("GET", e.listen, "/x", "old.test")
	group(resp)
	if resp.StatusCode != 301 || resp.Header.Get("Location") != "https://new.test/a%20b" {
		t.Errorf("redirect: %d to %q, want 301 to https://new.test/a%%20b", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp = do("GET", e.listen, "/secure/page?q=1", "shop.test")
	group(resp)
	if resp.StatusCode != 302 || resp.Header.Get("Location") != "https://shop.test/secure/page?q=1" {
		t.Errorf("https redirect: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp = do("GET", e.listen, "/maintenance/x", "")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || string(body) != maintenanceBody || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Errorf("respond: %d %q %q, want 503 %q", resp.StatusCode, resp.Header.Get("Content-Type"), body, maintenanceBody)
	}

	// Weights, over IPv6: 10,000 requests from 8 clients, bounded in time.
	const total = 10000
	var (
		mu     sync.Mutex
		counts = map[string]int{}
		wg     sync.WaitGroup
		next   = make(chan struct{}, total)
	)
	for range total {
		next <- struct{}{}
	}
	close(next)
	deadline := time.Now().Add(2 * time.Minute)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				if time.Now().After(deadline) {
					return
				}
				resp, err := client.Get("http://" + v6 + "/")
				g := "error"
				if err == nil {
					g = group(resp)
				}
				mu.Lock()
				counts[g]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	share := float64(counts["canary"]) / total * 100
	t.Logf("weights 95/5 over %d requests: %v (canary %.2f %%)", total, counts, share)
	if counts["web"]+counts["canary"] != total || share < 3 || share > 7 {
		t.Errorf("weights 95/5: %v, canary %.2f %%, want 5 ± 2 %% of %d answered requests", counts, share, total)
	}

	// The TCP frontend passes bytes both ways: an HTTP/1.0 request written
	// by hand reaches db's instance.
	conn, err := net.DialTimeout("tcp", tcpAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.0\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(conn)
	if err != nil || !strings.HasPrefix(string(raw), "HTTP/1.0 200") || !strings.Contains(string(raw), "X-Instance: db-001") {
		t.Errorf("tcp frontend: %v\n%s", err, raw)
	}
}
