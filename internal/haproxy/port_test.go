package haproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/proc"
)

func TestParseProcNetTCP(t *testing.T) {
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1111 1 0000000000000000 100 0 0 10 0
   1: 00000000:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2222 1 0000000000000000 100 0 0 10 0
   2: 0100007F:1F90 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000     0        0 3333 1 0000000000000000 20 4 30 10 -1
   3: garbage
`
	ls := parseProcNetTCP([]byte(table))
	if len(ls) != 2 {
		t.Fatalf("got %d listeners, want 2 (established and garbage lines skipped): %+v", len(ls), ls)
	}
	if l := ls[0]; l.port != 8080 || l.inode != 1111 {
		t.Errorf("listener 0: %+v", l)
	}
	if !ls[0].ip.Equal(net.IPv4(127, 0, 0, 1)) && !ls[0].ip.Equal(net.IPv4(1, 0, 0, 127)) {
		t.Errorf("listener 0 address %v", ls[0].ip)
	}
	wild := ls[1]
	for _, tc := range []struct {
		l    listener
		host string
		port int
		want bool
	}{
		{wild, "127.0.0.1", 80, true},
		{wild, "", 80, true},
		{wild, "127.0.0.1", 81, false},
		{listener{ip: net.IPv4(127, 0, 0, 1), port: 80}, "127.0.0.2", 80, false},
		{listener{ip: net.IPv4(127, 0, 0, 1), port: 80}, "127.0.0.1", 80, true},
		{listener{ip: net.IPv4(127, 0, 0, 1), port: 80}, "", 80, true},
		{listener{ip: net.IPv6loopback, port: 80}, "[::1]", 80, true},
		{listener{ip: net.IPv6unspecified, port: 80}, "127.0.0.1", 80, true},
		{listener{ip: net.IPv4(127, 0, 0, 1), port: 80}, "localhost", 80, true},
	} {
		if got := tc.l.conflicts(tc.host, tc.port); got != tc.want {
			t.Errorf("%v:%d conflicts with bind %s:%d = %v, want %v", tc.l.ip, tc.l.port, tc.host, tc.port, got, tc.want)
		}
	}
}

// TestLostRecord checks that an HAProxy whose master record was lost does not
// keep serving beside a new one: the frontends bind without SO_REUSEPORT and
// a new Manager stops the unrecorded master of its state directory first.
func TestLostRecord(t *testing.T) {
	requireHAProxy(t)
	ctx := context.Background()
	stateDir := t.TempDir()
	cleanupHAProxy(t, stateDir)
	port := freePort(t)
	cfg := testConfig(stateDir, "127.0.0.1:"+strconv.Itoa(port))
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	health := cfg.Groups[0].Health

	m1 := NewManager(cfg, testLogger(t))
	old := startBackend(t, "old")
	if err := m1.AddServer(ctx, Server{Backend: "web", Name: "old", Addr: loopback(old.port), Health: health}, true); err != nil {
		t.Fatal(err)
	}
	if err := m1.Start(ctx); err != nil {
		t.Fatal(err)
	}
	orphan := m1.PID()
	orphanStart, _ := proc.StartTicks(orphan)
	t.Cleanup(func() {
		if start, err := proc.StartTicks(orphan); err == nil && start == orphanStart {
			syscall.Kill(-orphan, syscall.SIGKILL)
		}
	})
	waitStatus(t, m1, map[string]string{"old": "UP"}, true)
	// shoal dies without a trace of the HAProxy it ran.
	m1.Detach()
	if err := os.Remove(PathsFor(stateDir).Dir + "/master.json"); err != nil {
		t.Fatal(err)
	}

	m2 := newTestManager(t, cfg)
	fresh := startBackend(t, "new")
	if err := m2.AddServer(ctx, Server{Backend: "web", Name: "new", Addr: loopback(fresh.port), Health: health}, true); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := m2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("second manager started in %v: pid %d, unrecorded pid %d", time.Since(start), m2.PID(), orphan)
	if m2.PID() == orphan {
		t.Fatalf("second manager runs the unrecorded master %d", orphan)
	}
	waitFor(t, 5*time.Second, "the unrecorded master to exit", func() (bool, string) {
		err := syscall.Kill(orphan, 0)
		return errors.Is(err, syscall.ESRCH), fmt.Sprint(err)
	})
	waitStatus(t, m2, map[string]string{"new": "UP"}, true)

	// New connections, so that each one could land on either master.
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	seen := make(map[string]int)
	for range 40 {
		body, err := get(client, url)
		if err != nil {
			t.Fatal(err)
		}
		seen[body]++
	}
	if seen["new"] != 40 {
		t.Errorf("responses came from %v, want all 40 from the new master's server", seen)
	}
}

// TestRecordWriteFails checks that a master whose record cannot be written is
// stopped rather than left running unrecorded.
func TestRecordWriteFails(t *testing.T) {
	requireHAProxy(t)
	stateDir := t.TempDir()
	cleanupHAProxy(t, stateDir)
	port := freePort(t)
	cfg := testConfig(stateDir, "127.0.0.1:"+strconv.Itoa(port))
	// The record is written to master.json.tmp first: a directory there
	// makes the write fail.
	if err := os.MkdirAll(PathsFor(stateDir).Dir+"/master.json.tmp/x", 0o700); err != nil {
		t.Fatal(err)
	}
	m := newTestManager(t, cfg)
	err := m.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "write master record (haproxy ") {
		t.Fatalf("Start: %v, want the record write error", err)
	}
	t.Log(err)
	if m.PID() != 0 {
		t.Errorf("PID after failed Start = %d", m.PID())
	}
	pids, inodes, err := portHolders(binds(cfg))
	if err != nil || inodes != nil {
		t.Errorf("port %d still held after a failed Start: pids %v, %v", port, pids, err)
	}
	if c, err := net.DialTimeout("tcp", cfg.Listen, time.Second); err == nil {
		c.Close()
		t.Errorf("port %d still accepts connections after a failed Start", port)
	}
}
