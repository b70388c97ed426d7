package testhost

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPair makes a pair: each namespace has its address on the link and
// routes the other's over it (VRRP across it is tested by package
// keepalived), and Close removes both namespaces.
func TestPair(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := NewPair(ctx, "lan0")
	if errors.Is(err, ErrUnsupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i, ns := range p.NS {
		out, err := exec.CommandContext(ctx, "ip", "-n", ns, "-o", "-4", "addr", "show", "dev", "lan0").CombinedOutput()
		if err != nil || !strings.Contains(string(out), " "+p.Addr[i]+"/24 ") {
			t.Fatalf("%s: addresses %q (%v), want %s/24", ns, out, err, p.Addr[i])
		}
		out, err = exec.CommandContext(ctx, "ip", "-n", ns, "route", "get", p.Addr[1-i]).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "dev lan0") {
			t.Fatalf("%s: route to %s: %q (%v), want over lan0", ns, p.Addr[1-i], out, err)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for _, ns := range p.NS {
		if _, err := os.Stat(filepath.Join("/run/netns", ns)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("namespace %s is still there after Close: %v", ns, err)
		}
	}
}
