package connlimit

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"
)

// serve runs an HTTP server on a bounded loopback listener: GET /busy holds
// its connection until release closes, a request with "Authorization: ok"
// is authorized, any other is answered 401.
func serve(t *testing.T, lim Limits, release <-chan struct{}) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 30 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch {
			case r.URL.Path == "/busy":
				<-release
			case r.Header.Get("Authorization") == "ok":
				Authorized(r.Context())
			default:
				w.WriteHeader(http.StatusUnauthorized)
			}
		})}
	l := New(ln, "test", lim, slog.New(slog.DiscardHandler))
	l.Track(srv)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return ln.Addr().String()
}

type client struct {
	t *testing.T
	net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{t: t, Conn: c, r: bufio.NewReader(c)}
}

// send writes a request for path with auth (none when empty).
func (c *client) send(path, auth string) {
	c.t.Helper()
	req := "GET " + path + " HTTP/1.1\r\nHost: x\r\n"
	if auth != "" {
		req += "Authorization: " + auth + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		c.t.Fatal(err)
	}
}

// get sends a request and returns its status.
func (c *client) get(path, auth string) int {
	c.t.Helper()
	c.send(path, auth)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		c.t.Fatalf("%s: %v", path, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// closedWithin reports whether the server closes c within d.
func (c *client) closedWithin(d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c.r)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// TestReserveNeedsTheToken: when what unauthenticated connections may hold
// is busy, a newcomer gets into the reserve on probation: silent, it is cut
// after the probation; with a request without the token, after its answer;
// with the token, it stays. With the listener full of busy and
// authenticated connections, a newcomer is refused, and no authenticated
// one is cut for it.
func TestReserveNeedsTheToken(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	addr := serve(t, Limits{Max: 5, PerSource: 10, Reserve: 3, Probation: 500 * time.Millisecond}, release)
	for range 2 {
		dial(t, addr).send("/busy", "")
	}
	time.Sleep(100 * time.Millisecond) // both requests read: busy

	silent := dial(t, addr)
	began := time.Now()
	if !silent.closedWithin(5 * time.Second) {
		t.Fatal("a silent connection on probation was not cut")
	}
	if d := time.Since(began); d < 400*time.Millisecond {
		t.Errorf("a silent connection on probation was cut after %s, before its 500ms", d)
	}

	noToken := dial(t, addr)
	if code := noToken.get("/", ""); code != http.StatusUnauthorized {
		t.Fatalf("no token: %d", code)
	}
	if !noToken.closedWithin(2 * time.Second) {
		t.Error("a connection on probation without the token was left open after its answer")
	}

	var ops []*client
	for i := range 3 {
		op := dial(t, addr)
		if code := op.get("/", "ok"); code != http.StatusOK {
			t.Fatalf("token on probation %d: %d", i+1, code)
		}
		ops = append(ops, op)
	}
	// Full: 2 busy, 3 authenticated and idle.
	if !dial(t, addr).closedWithin(2 * time.Second) {
		t.Error("a connection over the limit was left open")
	}
	for i, op := range ops {
		if code := op.get("/", "ok"); code != http.StatusOK {
			t.Errorf("authenticated connection %d after the refusal: %d", i+1, code)
		}
	}
}

// TestPerSourceCapDisplacesOldest: one address holds at most its share;
// each connection over it displaces that address's oldest idle one, never
// another address's.
func TestPerSourceCapDisplacesOldest(t *testing.T) {
	addr := serve(t, Limits{Max: 10, PerSource: 3, Reserve: 2, Probation: time.Second}, nil)
	dialFrom := func(src string) *client {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return &client{t: t, Conn: c, r: bufio.NewReader(c)}
	}
	other := dialFrom("127.0.0.2")
	var flood []*client
	for range 7 {
		flood = append(flood, dialFrom("127.0.0.3"))
	}
	for i, c := range flood {
		if cut := c.closedWithin(200 * time.Millisecond); cut != (i < 4) {
			t.Errorf("connection %d of 127.0.0.3: cut %v, want %v", i+1, cut, i < 4)
		}
	}
	if other.closedWithin(200 * time.Millisecond) {
		t.Error("127.0.0.2's connection was cut for 127.0.0.3's")
	}
	if code := other.get("/", "ok"); code != http.StatusOK {
		t.Errorf("127.0.0.2's request: %d", code)
	}
}

func TestSource(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.2:5000":                 "127.0.0.2",
		"[::ffff:192.0.2.7]:1":           "192.0.2.7",
		"[2001:db8:1:2:aaaa::1]:443":     "2001:db8:1:2::/64",
		"[2001:db8:1:2:bbbb:cc::9]:8443": "2001:db8:1:2::/64",
		"[::1]:80":                       "::/64",
	} {
		ta, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := source(ta); got != want {
			t.Errorf("source(%s) = %s, want %s", addr, got, want)
		}
	}
}

// TestPendingRequestIsNotIdle: a connection whose request waits unread (a
// busy machine has not run the server's read yet) is not closed to make
// room; an older silent one is not spared for it.
func TestPendingRequestIsNotIdle(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := New(ln, "test", Limits{Max: 8, PerSource: 2}, slog.New(slog.DiscardHandler))
	l.Track(&http.Server{}) // tracked, never served: nothing reads
	defer l.Close()
	accept := func() net.Conn {
		t.Helper()
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	sending := dial(t, ln.Addr().String())
	accept()
	silent := dial(t, ln.Addr().String())
	accept()
	if _, err := sending.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the bytes reach the server's socket
	dial(t, ln.Addr().String())
	accept()

	open := func(c *client) bool {
		_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		_, err := c.Read(make([]byte, 1))
		var ne net.Error
		return errors.As(err, &ne) && ne.Timeout()
	}
	if !open(sending) {
		t.Error("the connection with a request waiting was closed for a newcomer")
	}
	if open(silent) {
		t.Error("the silent connection was kept and the source went over its cap")
	}
}
