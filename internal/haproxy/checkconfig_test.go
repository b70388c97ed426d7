package haproxy

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCheckConfigTimeout: a `haproxy -c` that does not finish in time is
// said to have timed out, not to have rejected the config (under load a
// restart of shoal reported "haproxy rejected … (signal: killed)"); one that
// fails says what HAProxy printed. The haproxy here is a script standing
// in for both outcomes.
func TestCheckConfigTimeout(t *testing.T) {
	dir := t.TempDir()
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	slow := script("slow", "exec sleep 10")
	refuses := script("refuses", `echo "[ALERT] config : parsing [x:1] : unknown keyword 'frobnicate'"; exit 1`)

	t0 := time.Now()
	_, err := checkConfig(context.Background(), slow, "/dev/null", 200*time.Millisecond)
	if !errors.Is(err, errCheckTimeout) || !strings.Contains(err.Error(), "200ms") {
		t.Fatalf("a check that outlives its timeout: %v; want errCheckTimeout naming 200ms", err)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Fatalf("the check took %s, want it stopped at its 200ms timeout", d)
	}

	out, err := checkConfig(context.Background(), refuses, "/dev/null", 5*time.Second)
	if err == nil || errors.Is(err, errCheckTimeout) || !strings.Contains(out, "unknown keyword 'frobnicate'") {
		t.Fatalf("a refused config: err %v, output %q; want a refusal with HAProxy's words", err, out)
	}
}
