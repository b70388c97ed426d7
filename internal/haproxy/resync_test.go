package haproxy

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// stallingSocket is a Runtime API socket whose accept queue is full, so that
// every connect is refused with EAGAIN (HAProxy too busy to take a command),
// until serve is called: then it accepts, records each command line and
// answers as HAProxy 2.6 does.
type stallingSocket struct {
	path string
	ln   net.Listener
	held []net.Conn

	mu   sync.Mutex
	cmds []string
	wg   sync.WaitGroup
}

func newStallingSocket(t *testing.T) *stallingSocket {
	t.Helper()
	s := &stallingSocket{path: t.TempDir() + "/admin.sock"}
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: s.path}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), s.path)
	s.ln, err = net.FileListener(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	for len(s.held) < 64 {
		c, err := net.Dial("unix", s.path)
		if errors.Is(err, syscall.EAGAIN) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		s.held = append(s.held, c)
	}
	if _, err := net.Dial("unix", s.path); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("the accept queue did not fill (dial: %v)", err)
	}
	t.Cleanup(func() {
		s.ln.Close()
		for _, c := range s.held {
			c.Close()
		}
		s.wg.Wait()
	})
	return s
}

// serve starts taking commands; the connections that filled the queue are
// closed, as a client that gave up would.
func (s *stallingSocket) serve() {
	for _, c := range s.held {
		c.Close()
	}
	s.held = nil
	s.wg.Go(func() {
		for {
			c, err := s.ln.Accept()
			if err != nil {
				return
			}
			s.wg.Go(func() {
				defer c.Close()
				line, err := bufio.NewReader(c).ReadString('\n')
				if err != nil {
					return
				}
				line = strings.TrimSpace(line)
				s.mu.Lock()
				s.cmds = append(s.cmds, line)
				s.mu.Unlock()
				switch {
				case strings.HasPrefix(line, "add server "):
					c.Write([]byte(msgServerAdded + "\n\n"))
				case strings.HasPrefix(line, "del server "):
					c.Write([]byte(msgServerDeleted + "\n\n"))
				default:
					c.Write([]byte("\n"))
				}
			})
		}
	})
}

func (s *stallingSocket) commands() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.cmds)
}

// TestBusyHAProxyIsResynced: a Runtime API command HAProxy is too busy to
// take (EAGAIN until the command's timeout) is not "HAProxy down", after
// which only a restart would apply it: the change is applied once HAProxy
// takes commands again, while it keeps running.
func TestBusyHAProxyIsResynced(t *testing.T) {
	sock := newStallingSocket(t)
	cfg := testConfig(t.TempDir(), "127.0.0.1:8080")
	m := NewManager(cfg, testLogger(t))
	m.client = &Client{Socket: sock.path}
	m.up = true // as after Start: the supervisor sees HAProxy running
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { m.resyncLoop(ctx) })
	defer func() { cancel(); wg.Wait() }()

	start := time.Now()
	srv := Server{Backend: "web", Name: "web-1", Addr: "127.0.0.1:9001", Health: cfg.Groups[0].Health}
	if err := m.AddServer(ctx, srv, false); err != nil {
		t.Fatalf("AddServer on a busy HAProxy: %v, want it tolerated (the registry holds it)", err)
	}
	if d := time.Since(start); d < cmdTimeout {
		t.Fatalf("AddServer gave up after %v, before the command's timeout %v", d, cmdTimeout)
	}
	if got := sock.commands(); len(got) != 0 {
		t.Fatalf("a stalled socket took commands: %q", got)
	}
	m.mu.Lock()
	_, pending := m.unsynced[serverKey{"web", "web-1"}]
	m.mu.Unlock()
	if !pending {
		t.Fatal("the server the busy HAProxy did not take is not recorded for a re-sync")
	}

	// HAProxy (never restarted) takes commands again: the server is added,
	// gated (health down until checked), in rotation, with its weight.
	sock.serve()
	want := []string{
		"add server web/web-1 127.0.0.1:9001 id ",
		"enable health web/web-1; enable server web/web-1; set server web/web-1 health down",
		"set server web/web-1 state ready; set server web/web-1 weight 100",
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		got := sock.commands()
		i := 0
		for _, c := range got {
			if i < len(want) && strings.HasPrefix(c, want[i]) {
				i++
			}
		}
		m.mu.Lock()
		left := len(m.unsynced)
		m.mu.Unlock()
		if i == len(want) && left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not re-synced 15 s after HAProxy answered again: commands %q, want in order prefixes %q; %d servers still pending", got, want, left)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// A removal the busy HAProxy missed is re-synced the same way.
	sock2 := newStallingSocket(t)
	m.client = &Client{Socket: sock2.path}
	if err := m.RemoveServer(ctx, "web", "web-1"); err != nil {
		t.Fatalf("RemoveServer on a busy HAProxy: %v, want it tolerated", err)
	}
	sock2.serve()
	deadline = time.Now().Add(15 * time.Second)
	for {
		m.mu.Lock()
		left := len(m.unsynced)
		m.mu.Unlock()
		got := sock2.commands()
		if left == 0 && slices.Contains(got, "set server web/web-1 state maint") && slices.Contains(got, "del server web/web-1") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("removal not re-synced: commands %q, %d servers pending", got, left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
