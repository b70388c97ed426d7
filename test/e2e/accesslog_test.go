package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAccessLog: shoal serve writes HAProxy's sampled request log to a
// rotated STATE_DIR/logs/access.log.
func TestAccessLog(t *testing.T) {
	parallel(t)
	e := newEnv(t, "access_log: {sample: 2, max_size: 4KiB, max_files: 2}\n", groupSpec{Name: "web", Min: 1, Max: 1})
	e.start()
	e.waitInService("web", 1)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	const requests = 160
	for i := range requests {
		resp, err := client.Get(fmt.Sprintf("http://%s/?e2e=%03d", e.listen, i))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	e.stop()
	logs := filepath.Join(e.stateDir(), "logs")
	var lines []string
	for _, name := range []string{"access.log.1", "access.log"} {
		b, err := os.ReadFile(filepath.Join(logs, name))
		if err != nil {
			t.Fatalf("%v (a 4 KiB access.log must have rotated once)", err)
		}
		for l := range strings.Lines(string(b)) {
			if strings.Contains(l, " GET /?e2e=") {
				lines = append(lines, l)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(logs, "access.log.2")); !os.IsNotExist(err) {
		t.Errorf("access.log.2 exists with max_files 2: %v", err)
	}
	// sample 1:2 logs every second request; a fixed rate is not in the line.
	if len(lines) != requests/2 {
		t.Errorf("%d of %d requests logged, want %d:\n%s", len(lines), requests, requests/2, strings.Join(lines, ""))
	}
	for _, l := range lines {
		if f := strings.Fields(l); len(f) != 15 || f[2] != "web" || f[3] != "web-001" || f[4] != "200" || f[12] != "-" {
			t.Errorf("access log line %q", l)
		}
	}
}
