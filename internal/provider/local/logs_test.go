package local

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
)

// TestLogsRotateWhileTheInstanceWrites: a running instance's log is rotated
// by size (copy, then truncate) and the instance goes on writing into the
// truncated file from its start, also after a new Provider (a restarted
// shoal) adopted it.
func TestLogsRotateWhileTheInstanceWrites(t *testing.T) {
	t.Parallel()
	stateDir := t.TempDir()
	inst := start(t, New(stateDir, nil), "web-001", helperTemplate(t, "chatty"))
	get(t, addrPort(inst.Record().Addr))

	// As after a restart of shoal: rotation is done by whoever adopted it.
	p := New(stateDir, nil)
	if _, err := p.Adopt(context.Background(), inst.Record(), helperTemplate(t, "chatty")); err != nil {
		t.Fatal(err)
	}
	cfg := config.InstanceLogs{MaxSize: 16 << 10, Keep: 2, Retention: time.Hour}
	log := filepath.Join(stateDir, "logs", "web-001.log")
	for range 5 {
		waitSize(t, log, cfg.MaxSize+1)
		if err := p.maintainLogs(cfg, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{log + ".1", log + ".2"} {
		if fi, err := os.Stat(f); err != nil || fi.Size() < cfg.MaxSize {
			t.Errorf("rotated %s: %v (size %d), want at least %d bytes", f, err, size(fi), cfg.MaxSize)
		}
	}
	if _, err := os.Stat(log + ".3"); !os.IsNotExist(err) {
		t.Errorf("%s.3 exists (%v); keep is 2", log, err)
	}
	// Writes continue at the start of the truncated file, not at the old
	// offset (which would leave a hole of zeros).
	waitSize(t, log, 1000)
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.IndexByte(b[:1000], 0) >= 0 {
		t.Fatal("the log has a hole after truncation: the instance does not append")
	}
	if !bytes.Contains(b, []byte("xxxxxxxxxx\n")) {
		t.Fatalf("the instance's output no longer reaches its log: %q", b[:100])
	}
}

// TestLogsOfGoneInstancesExpire: the logs of an instance that does not run
// are deleted once older than the retention; a running instance's and files
// that are not instance logs are left alone.
func TestLogsOfGoneInstancesExpire(t *testing.T) {
	t.Parallel()
	stateDir := t.TempDir()
	p := New(stateDir, nil)
	inst := start(t, p, "web-001", helperTemplate(t, "serve"))
	get(t, addrPort(inst.Record().Addr))
	dir := filepath.Join(stateDir, "logs")
	old := time.Now().Add(-2 * time.Hour)
	files := map[string]bool{ // name → should survive
		"web-001.log":   true,
		"web-001.log.1": true,
		"web-002.log":   false,
		"web-002.log.1": false,
		"access.log":    true,
		"notes.txt":     true,
	}
	for name := range files {
		f := filepath.Join(dir, name)
		if name != "web-001.log" {
			if err := os.WriteFile(f, []byte("old\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chtimes(f, old, old); err != nil {
			t.Fatal(err)
		}
	}
	fresh := filepath.Join(dir, "web-003.log")
	if err := os.WriteFile(fresh, []byte("recent\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	files["web-003.log"] = true

	if err := p.maintainLogs(config.InstanceLogs{MaxSize: 1 << 20, Keep: 3, Retention: time.Hour}, time.Now()); err != nil {
		t.Fatal(err)
	}
	for name, keep := range files {
		_, err := os.Stat(filepath.Join(dir, name))
		if keep && err != nil {
			t.Errorf("%s was deleted: %v", name, err)
		}
		if !keep && err == nil {
			t.Errorf("%s of a gone instance survived its retention", name)
		}
	}
}

func waitSize(t *testing.T, path string, n int64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if fi, err := os.Stat(path); err == nil && fi.Size() >= n {
			return
		}
	}
	t.Fatalf("%s did not reach %d bytes", path, n)
}

func size(fi os.FileInfo) int64 {
	if fi == nil {
		return -1
	}
	return fi.Size()
}
