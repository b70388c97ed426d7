package ha

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/group"
	"github.com/shoal-lb/shoal/internal/haproxy"
	"github.com/shoal-lb/shoal/internal/instance"
	"github.com/shoal-lb/shoal/internal/store"
	"github.com/shoal-lb/shoal/internal/testport"
)

// configCore is a recordingCore whose config is cfg.
type configCore struct {
	*recordingCore
	cfg *config.Config
}

func (c configCore) Config() *config.Config { return c.cfg }

// TestMirrorFinishesHalfAddedServer runs a real HAProxy whose server of an
// instance the leader has in service was added and never enabled (an add
// cut short when the node stopped leading): the mirror enables it, and the
// node becomes synced, instead of leaving it in maintenance for ever.
func TestMirrorFinishesHalfAddedServer(t *testing.T) {
	if _, err := exec.LookPath("haproxy"); err != nil {
		t.Skip("haproxy not installed")
	}
	ctx := context.Background()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	addr := ln.Addr().String()

	listen := net.JoinHostPort("127.0.0.1", strconv.Itoa(testport.Free(t)))
	stateDir := t.TempDir()
	health := config.DefaultHealth
	health.Interval, health.FastInter, health.Rise = 200*time.Millisecond, 200*time.Millisecond, 1
	cfg := &config.Config{
		Listen:   listen,
		StateDir: stateDir,
		HAProxy:  config.HAProxy{Binary: "haproxy", Timeouts: config.DefaultTimeouts},
		Groups:   []config.Group{{Name: "web", Balance: "roundrobin", Health: health}},
	}
	cfg.Frontends = []config.Frontend{config.Shorthand(listen, nil, cfg.Groups)}
	lb := haproxy.NewManager(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := lb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stop, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := lb.Stop(stop); err != nil {
			t.Errorf("stop haproxy: %v", err)
		}
	})

	// Added with its checks, as shoal adds one, and never enabled: in
	// maintenance.
	port := ln.Addr().(*net.TCPAddr).Port
	c, err := net.Dial("unix", haproxy.PathsFor(stateDir).AdminSocket)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "add server web/web-1 127.0.0.1:"+strconv.Itoa(port)+" check inter 200ms rise 1\n")
	answer, _ := io.ReadAll(c)
	c.Close()
	t.Logf("add server: %s", answer)

	h := &Node{core: configCore{newRecordingCore(nil), cfg}, lb: lb, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	k := mirrored{"web", "web-1", addr}
	known, _, err := h.served(ctx)
	if err != nil || !known[k] {
		t.Fatalf("served = %v, %v; want web-1 at %s in maintenance", known, err, addr)
	}
	set := []store.Instance{{Record: instance.Record{Group: "web", Name: "web-1", Addr: addr}, State: string(group.InService)}}
	deadline := time.Now().Add(10 * time.Second)
	for {
		known, up, err := h.served(ctx)
		if err != nil {
			t.Fatal(err)
		}
		applied, inService := h.apply(ctx, set, known)
		if applied && allIn(inService, up) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not synced after 10s: applied %v, in service %v, up %v, known %v", applied, inService, up, known)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
