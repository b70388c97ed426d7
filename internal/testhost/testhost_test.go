package testhost

import (
	"context"
	"errors"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestLab makes two hosts, logs in to each over its veth with the lab's key
// and known_hosts (OpenSSH's client, host key checked), sees that a process
// started there lives in that host's namespace, and that Kill and Close
// leave nothing behind.
func TestLab(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := New(ctx, t.TempDir(), 2)
	if errors.Is(err, ErrUnsupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ssh := func(h *Host, cmd string) (string, error) {
		out, err := exec.CommandContext(ctx, "ssh", "-i", l.KeyFile, "-o", "UserKnownHostsFile="+l.KnownHosts,
			"-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", l.User+"@"+h.Addr, cmd).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	for _, h := range l.Hosts {
		out, err := ssh(h, "ip -o -4 addr show scope global")
		if err != nil {
			t.Fatalf("ssh %s: %v: %s", h.Addr, err, out)
		}
		if !strings.Contains(out, h.Addr+"/30") || strings.Contains(out, l.Hosts[1-slices.Index(l.Hosts, h)].Addr) {
			t.Fatalf("host %s sees addresses %q", h.Addr, out)
		}
	}
	h := l.Hosts[0]
	out, err := ssh(h, "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $!")
	if err != nil {
		t.Fatalf("start a process on %s: %v: %s", h.Addr, err, out)
	}
	pids, err := h.PIDs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if pid, err := strconv.Atoi(out); err != nil || !slices.Contains(pids, pid) {
		t.Fatalf("pid %s not among host %s's processes %v", out, h.Name, pids)
	}
	if err := h.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if pids, _ := h.PIDs(ctx); len(pids) != 0 {
		t.Fatalf("after Kill host %s still runs %v", h.Name, pids)
	}
	if _, err := ssh(h, "true"); err == nil {
		t.Fatal("ssh to a killed host succeeded")
	}
	if err := h.StartSSHD(ctx); err != nil {
		t.Fatal(err)
	}
	if out, err := ssh(h, "true"); err != nil {
		t.Fatalf("ssh after restart: %v: %s", err, out)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := exec.Command("ip", "netns", "pids", h.Name).Run(); err == nil {
		t.Fatalf("namespace %s still there after Close", h.Name)
	}
}
