package accesslog

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		line string
		want Entry
	}{
		{"1795424991.690 127.0.0.1:47712 web s1 200 0 1 2 3 569 0 ---- 25 GET /\n", Entry{
			Time: time.Unix(1795424991, 690*int64(ms)), Client: "127.0.0.1:47712", Backend: "web", Server: "s1",
			Status: 200, Tw: 0, Tc: ms, Tr: 2 * ms, Ta: 3 * ms, Bytes: 569, Termination: "----", SampleRate: 25, Method: "GET", URI: "/",
		}},
		// No server: the timers of the phases that did not happen are -1, and
		// no backend chose a sample rate.
		{"1795424991.007 ::1:5000 shoal <NOSRV> 408 -1 -1 -1 10001 214 0 cR-- - <BADREQ> <BADREQ>", Entry{
			Time: time.Unix(1795424991, 7*int64(ms)), Client: "::1:5000", Backend: "shoal", Server: "<NOSRV>",
			Status: 408, Tw: -ms, Tc: -ms, Tr: -ms, Ta: 10001 * ms, Bytes: 214, Termination: "cR--", Method: "<BADREQ>", URI: "<BADREQ>",
		}},
		// Redispatched after retries; a URI with a space stays whole; 0 (under
		// 100 requests/s) is every request.
		{"1795424991.100 10.0.0.1:1 api api-002 503 0 0 7 1030 0 +3 sH-- 0 POST /a b?c=d", Entry{
			Time: time.Unix(1795424991, 100*int64(ms)), Client: "10.0.0.1:1", Backend: "api", Server: "api-002",
			Status: 503, Tr: 7 * ms, Ta: 1030 * ms, Retries: 3, Redispatched: true, Termination: "sH--", SampleRate: 1, Method: "POST", URI: "/a b?c=d",
		}},
	} {
		got, err := Parse(tc.line)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.line, err)
			continue
		}
		if got != tc.want {
			t.Errorf("Parse(%q)\n got %+v\nwant %+v", tc.line, got, tc.want)
		}
	}
}

func TestParseMalformed(t *testing.T) {
	good := strings.Fields("1795424991.690 127.0.0.1:47712 web s1 200 0 1 2 3 569 0 ---- 10 GET /")
	bad := map[int][]string{
		0:  {"", "x", "1795424991", "1795424991.69", "-1.000", "1.abc", "99999999999999999999.000"},
		1:  {"127.0.0.1", "127.0.0.1:", ":80"},
		4:  {"abc", "-2", "1000", "2e2"},
		5:  {"x", "-5", "99999999999"},
		8:  {"1.5"},
		9:  {"-1", "many"},
		10: {"+", "-1", "x"},
		11: {"--", "-----"},
		12: {"x", "-1", "1.5", "99999999"},
	}
	for i, vals := range bad {
		for _, v := range vals {
			f := append([]string(nil), good...)
			f[i] = v
			line := strings.Join(f, " ")
			if e, err := Parse(line); err == nil {
				t.Errorf("Parse(%q) = %+v, want an error", line, e)
			}
		}
	}
	for _, line := range []string{"", " ", "\x00\x00", strings.Repeat(" ", 20), "a b c", strings.Repeat("x", maxLine+1),
		"1795424991.690 127.0.0.1:47712 web s1 200 0 1 2 3 569 0 ---- 1"} {
		if _, err := Parse(line); err == nil {
			t.Errorf("Parse(%q) accepted", truncate(line))
		}
	}
}

// TestParseNotice: HAProxy's own messages on the log socket are told apart
// from malformed lines.
func TestParseNotice(t *testing.T) {
	for _, line := range []string{
		"127.0.0.1:34236 [28/Nov/2026:10:59:40.239] edge/1: Connection closed during SSL handshake",
		"[::1]:443 [28/Nov/2026:10:59:40.239] edge/2: SSL handshake failure",
		"Proxy web stopped (cumulated conns: FE: 0, BE: 12).",
	} {
		if _, err := Parse(line); !errors.Is(err, ErrNotRequest) {
			t.Errorf("Parse(%q) = %v, want ErrNotRequest", line, err)
		}
	}
	for _, line := range []string{"garbage", "a [b] c d", "1795424991.690 127.0.0.1:47712 web s1 200 0 1 2 3 569 0 ---- 1"} {
		if _, err := Parse(line); err == nil || errors.Is(err, ErrNotRequest) {
			t.Errorf("Parse(%q) = %v, want a malformed line's error", line, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add("1795424991.690 127.0.0.1:47712 web s1 200 0 1 2 3 569 0 ---- 25 GET /")
	f.Add("1795424991.007 ::1:5000 shoal <NOSRV> 408 -1 -1 -1 10001 214 +0 cR-- - <BADREQ> <BADREQ>")
	f.Fuzz(func(t *testing.T, line string) {
		_, _ = Parse(line) // must not panic
	})
}

func TestRotatingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "logs", "access.log")
	rf, err := openRotating(path, 100, 3)
	if err != nil {
		t.Fatal(err)
	}
	line := []byte(strings.Repeat("x", 39)) // 40 bytes with the newline
	for range 7 {
		if err := rf.WriteLine(line); err != nil {
			t.Fatal(err)
		}
	}
	if err := rf.Close(); err != nil {
		t.Fatal(err)
	}
	// 7 lines, 2 per file: access.log.2 was dropped once, the rest remain.
	for _, f := range []struct {
		name  string
		lines int
	}{{"access.log", 1}, {"access.log.1", 2}, {"access.log.2", 2}, {"access.log.3", -1}} {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(path), f.name))
		if f.lines < 0 {
			if !os.IsNotExist(err) {
				t.Errorf("%s exists: rotation keeps 3 files", f.name)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(b), "\n"); n != f.lines {
			t.Errorf("%s has %d lines, want %d", f.name, n, f.lines)
		}
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("access.log mode: %v %v", fi, err)
	}
}

// TestReader sends datagrams over a real socket, as HAProxy does.
func TestReader(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "run", "log.sock")
	file := filepath.Join(dir, "logs", "access.log")
	// A stale socket from a crashed run is replaced.
	if err := os.MkdirAll(filepath.Dir(sock), 0o700); err != nil {
		t.Fatal(err)
	}
	stale, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	stale.Close()
	r, err := Open(Options{Socket: sock, File: file, MaxSize: 1 << 20, MaxFiles: 2, SampleRate: 10})
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode: %v %v", fi, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()

	fast, unsubFast := r.Subscribe(100)
	defer unsubFast()
	slow, _ := r.Subscribe(1) // never read: must not hold the reader up
	late, unsubLate := r.Subscribe(10)
	unsubLate()
	unsubLate()
	if _, ok := <-late; ok {
		t.Error("a cancelled subscription's channel is open")
	}

	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n = 50
	for i := range n {
		fmt.Fprintf(c, "1795424991.%03d 127.0.0.1:%d web s1 200 0 1 2 3 569 0 ---- - GET /%d\n", i, 1000+i, i)
	}
	c.Write([]byte("garbage\x00\xff"))
	c.Write([]byte("127.0.0.1:34236 [28/Nov/2026:10:59:40.239] edge/1: Connection closed during SSL handshake\n"))
	for i := range n {
		select {
		case e := <-fast:
			if e.URI != fmt.Sprintf("/%d", i) || e.SampleRate != 10 || e.Status != 200 {
				t.Fatalf("entry %d: %+v", i, e)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("entry %d did not arrive", i)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for r.Stats().Lines < n+2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if s := r.Stats(); s.Lines != n+2 || s.Requests != n || s.Notices != 1 || s.Malformed != 1 || s.Dropped != n-1 {
		t.Errorf("stats %+v, want %d lines, 1 notice, 1 malformed, %d dropped (the slow subscriber)", s, n+2, n-1)
	}
	// Written within flushAfter of the last line, without stopping.
	deadline = time.Now().Add(5 * time.Second)
	var b []byte
	for time.Now().Before(deadline) {
		if b, _ = os.ReadFile(file); strings.Count(string(b), "\n") == n+2 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := strings.Count(string(b), "\n"); got != n+2 {
		t.Errorf("access.log has %d lines, want %d", got, n+2)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not stop with its context")
	}
	if _, ok := <-slow; !ok {
		t.Error("the slow subscriber lost its buffered entry")
	}
	if _, ok := <-slow; ok {
		t.Error("subscription open after Run returned")
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket left behind: %v", err)
	}
	if ch, _ := r.Subscribe(1); ch != nil {
		if _, ok := <-ch; ok {
			t.Error("Subscribe after stop returned an open channel")
		}
	}
}
