package haproxy

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// testdata/show_sess.txt was captured at the same moment as show_stat.txt.
func TestCountStreams(t *testing.T) {
	out := readTestdata(t, "show_sess.txt")
	for _, tc := range []struct {
		be, srv string
		want    int
	}{
		{"web", "s1", 3},
		{"web", "s2", 1},
		{"web", "s3", 0},
		{"web", "s", 0},    // no prefix match
		{"we", "s1", 0},    // no prefix match
		{"shoal", "s1", 0}, // fe=shoal is not be=shoal
	} {
		got, err := countStreams(out, onServer(tc.be, tc.srv))
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("countStreams(%s/%s) = %d, want %d", tc.be, tc.srv, got, tc.want)
		}
	}
	if _, err := countStreams("Unknown command\n", onServer("web", "s1")); err == nil {
		t.Error("countStreams accepted an error answer")
	}
}

func TestAPIError(t *testing.T) {
	err := error(&APIError{Command: "bogus", Message: "Unknown command, but maybe one of the following ones is a better match:\n  show fd"})
	if got := err.Error(); got != `haproxy "bogus": Unknown command, but maybe one of the following ones is a better match: …` {
		t.Errorf("Error() = %q", got)
	}
	if !isAPIError(err, "Unknown command") || isAPIError(err, msgNoSuchServer) {
		t.Error("isAPIError does not match by message")
	}
}

// TestExecWaitsForAFullAcceptQueue: a unix socket whose accept queue is full
// refuses connections with EAGAIN. That is HAProxy busy, not down (seen when a
// scale-out added 80 servers at once), so Exec waits for room.
func TestExecWaitsForAFullAcceptQueue(t *testing.T) {
	sock := t.TempDir() + "/busy.sock"
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: sock}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), sock)
	ln, err := net.FileListener(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	// Fill the queue until a connect is refused with EAGAIN.
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for len(held) < 64 {
		c, err := net.Dial("unix", sock)
		if errors.Is(err, syscall.EAGAIN) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	if _, err := net.Dial("unix", sock); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("the accept queue did not fill (dial: %v)", err)
	}

	// 200 ms later the server accepts everything and answers.
	go func() {
		time.Sleep(200 * time.Millisecond)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 64)
				_, _ = c.Read(buf)
				_, _ = io.WriteString(c, "answer\n")
			}()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := (&Client{Socket: sock}).Exec(ctx, "show info")
	if err != nil || !strings.Contains(out, "answer") {
		t.Fatalf("Exec on a busy socket: %q, %v; want the answer once there is room", out, err)
	}
}
