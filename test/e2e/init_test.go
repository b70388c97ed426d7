package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The file `shoal init --local` writes serves as written: `shoal serve`
// on it starts the group behind HAProxy, which answers from both
// instances.
func TestInitLocalServes(t *testing.T) {
	parallel(t)
	dir := t.TempDir()
	e := &shoalEnv{t: t, dir: dir, cfgPath: filepath.Join(dir, "shoal.yaml"), listen: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	cmd := filepath.Join(binDir, "demo-backend") + " --listen 127.0.0.1:{{.Port}} --name {{.Name}}"
	// Only what this machine needs differs from the defaults: a free port,
	// and the state directory the harness cleans up after.
	mk := exec.Command(filepath.Join(binDir, "shoal"), "init", "--local", cmd, "--listen", e.listen, "--state-dir", "state", "-o", e.cfgPath)
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("shoal init: %v\n%s", err, out)
	}
	live.Lock()
	if live.envs == nil {
		live.envs = map[*shoalEnv]bool{}
	}
	live.envs[e] = true
	live.Unlock()
	t.Cleanup(e.cleanup)

	if out, stderr, code := e.cli("validate"); code != 0 {
		t.Fatalf("shoal validate: exit %d\n%s%s", code, out, stderr)
	}
	e.start()
	e.waitInService("web", 2) // min_size 2, as written
	e.checkInSync("web")
	seen := map[string]bool{}
	client := &http.Client{Timeout: 5 * time.Second}
	for range 20 {
		resp, err := client.Get("http://" + e.listen + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /: %d, %v", resp.StatusCode, err)
		}
		for _, name := range []string{"web-001", "web-002"} {
			if strings.Contains(string(body), "Instance "+name) {
				seen[name] = true
			}
		}
	}
	if len(seen) != 2 {
		t.Errorf("20 requests were answered by %v, want both instances", seen)
	}
	e.stop()
}
