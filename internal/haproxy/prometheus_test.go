package haproxy

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestPrometheusExporter runs real HAProxy with haproxy.prometheus set: its
// built-in exporter lists a server added at runtime, and nothing but
// /metrics is served on that port.
func TestPrometheusExporter(t *testing.T) {
	requireHAProxy(t)
	ctx := context.Background()
	stateDir := t.TempDir()
	cleanupHAProxy(t, stateDir)
	cfg := testConfig(stateDir, "127.0.0.1:"+strconv.Itoa(freePort(t)))
	cfg.HAProxy.Global = []string{"nbthread 1"}
	promAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	cfg.HAProxy.Prometheus = promAddr

	m := newTestManager(t, cfg)
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	b := startBackend(t, "web-001")
	if err := m.AddServer(ctx, Server{Backend: "web", Name: b.name, Addr: loopback(b.port), Health: cfg.Groups[0].Health}, false); err != nil {
		t.Fatal(err)
	}

	client := &http.Client{Timeout: 5 * time.Second}
	want := []string{
		`haproxy_server_status{proxy="web",server="web-001",state="UP"} 1`,
		`haproxy_server_check_status{proxy="web",server="web-001",state="L7OK"} 1`,
		`haproxy_backend_active_servers{proxy="web"} 1`,
	}
	waitFor(t, 10*time.Second, "the exporter to list web-001 as UP", func() (bool, string) {
		body, err := get(client, "http://"+promAddr+"/metrics")
		if err != nil {
			return false, err.Error()
		}
		for _, w := range want {
			if !strings.Contains(body, w+"\n") {
				return false, fmt.Sprintf("no %q in %d bytes", w, len(body))
			}
		}
		return true, ""
	})

	resp, err := client.Get("http://" + promAddr + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET / on the exporter port: %d, want 404", resp.StatusCode)
	}
}
