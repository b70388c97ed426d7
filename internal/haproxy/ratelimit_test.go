package haproxy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
)

func TestRateLimitLines(t *testing.T) {
	byIP := config.Frontend{Name: "edge", Mode: config.ModeHTTP, RateLimit: &config.RateLimit{Requests: 100, Per: 10 * time.Second, By: "ip"}}
	got, err := rateLimitLines(byIP)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"stick-table type ipv6 size 100k expire 10000ms store http_req_rate(10000ms),gpc0",
		"http-request track-sc0 src",
		"acl shoal_rate_limited sc_http_req_rate(0) gt 100",
		"http-request sc-inc-gpc0(0) if shoal_rate_limited",
		"http-request deny deny_status 429 if shoal_rate_limited",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("by ip:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	byHeader := byIP
	byHeader.RateLimit = &config.RateLimit{Requests: 5, Per: time.Minute, By: "header:X-Api-Key"}
	got, err = rateLimitLines(byHeader)
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != "stick-table type string len 64 size 100k expire 60000ms store http_req_rate(60000ms),gpc0" ||
		got[1] != "http-request track-sc0 req.hdr(X-Api-Key),sha2(256),hex if { req.hdr(X-Api-Key) -m found }" {
		t.Errorf("by header:\n%s", strings.Join(got, "\n"))
	}
	if got, err := rateLimitLines(config.Frontend{Name: "edge"}); got != nil || err != nil {
		t.Errorf("no limit: %q, %v", got, err)
	}

	for name, rl := range map[string]config.RateLimit{
		"no requests":      {Requests: 0, Per: time.Second, By: "ip"},
		"no period":        {Requests: 1, By: "ip"},
		"period too long":  {Requests: 1, Per: 30 * 24 * time.Hour, By: "ip"},
		"by a cookie":      {Requests: 1, Per: time.Second, By: "cookie:x"},
		"header injection": {Requests: 1, Per: time.Second, By: "header:X) }\n    http-request allow"},
		"header space":     {Requests: 1, Per: time.Second, By: "header:X Y"},
	} {
		fe := byIP
		fe.RateLimit = &rl
		if got, err := rateLimitLines(fe); err == nil {
			t.Errorf("%s: accepted: %q", name, got)
		}
	}
	tcp := byIP
	tcp.Mode = config.ModeTCP
	if got, err := rateLimitLines(tcp); err == nil {
		t.Errorf("tcp frontend: accepted: %q", got)
	}
}

func TestParseTable(t *testing.T) {
	out := "# table: edge, type: ipv6, size:102400, used:3\n" +
		"0x55d1c6b0e4a0: key=::ffff:127.0.0.1 use=0 exp=9998 gpc0=5 http_req_rate(10000)=15\n" +
		"0x55d1c6b0e4b0: key=::1 use=1 exp=9000 gpc0=9 http_req_rate(10000)=20\n" +
		"0x55d1c6b0e4c0: key=a key use=x use=0 exp=100 gpc0=5 http_req_rate(10000)=30\n\n"
	got, err := parseTable(out, "edge")
	if err != nil {
		t.Fatal(err)
	}
	want := []LimitedClient{
		{Frontend: "edge", Client: "::1", Refused: 9, Rate: 20},
		{Frontend: "edge", Client: "a key use=x", Refused: 5, Rate: 30},
		{Frontend: "edge", Client: "127.0.0.1", Refused: 5, Rate: 15},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	if _, err := parseTable("No such table\n", "edge"); err == nil || err.Error() != "No such table" {
		t.Errorf("an error answer: %v", err)
	}
	if got, err := parseTable("# table: edge, type: ipv6, size:102400, used:0\n\n", "edge"); err != nil || len(got) != 0 {
		t.Errorf("an empty table: %v, %v", got, err)
	}
}

// TestRateLimit: each client gets its limit's requests, then 429 (by
// address, and by header on another frontend), other clients are not
// affected, and LimitedClients names the limited ones.
func TestRateLimit(t *testing.T) {
	ctx := context.Background()
	keyPort, proxiedPort := freePort(t), freePort(t)
	m, cfg, port := startEdited(t, func(cfg *config.Config) {
		cfg.Frontends[0].RateLimit = &config.RateLimit{Requests: 5, Per: time.Minute, By: "ip"}
		cfg.Frontends = append(cfg.Frontends, config.Frontend{
			Name: "keys", Bind: []string{"127.0.0.1:" + strconv.Itoa(keyPort)}, Mode: config.ModeHTTP,
			RateLimit: &config.RateLimit{Requests: 3, Per: time.Minute, By: "header:X-Api-Key"},
			Routes:    []config.Route{{Group: "web"}},
		}, config.Frontend{
			// Behind a proxy on 127.0.0.3: the client is its X-Forwarded-For.
			Name: "proxied", Bind: []string{"127.0.0.1:" + strconv.Itoa(proxiedPort)}, Mode: config.ModeHTTP,
			RateLimit:      &config.RateLimit{Requests: 2, Per: time.Minute, By: "ip"},
			TrustedProxies: []string{"127.0.0.3/32"},
			Routes:         []config.Route{{Group: "web"}},
		})
	})
	b := startBackend(t, "b1")
	if err := m.AddServer(ctx, Server{Backend: "web", Name: "b1", Addr: loopback(b.port), Health: cfg.Groups[0].Health}, true); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, m, map[string]string{"b1": "UP"}, true)

	// from returns a client whose connections come from the address src.
	from := func(src string) *http.Client {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: d.DialContext}}
	}
	// statuses sends n requests with the header h (if any) and returns
	// their statuses in order.
	statuses := func(c *http.Client, url string, h http.Header, n int) []int {
		t.Helper()
		var codes []int
		for range n {
			req, err := http.NewRequest("GET", url, nil)
			if err != nil {
				t.Fatal(err)
			}
			maps.Copy(req.Header, h)
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			codes = append(codes, resp.StatusCode)
		}
		return codes
	}
	expect := func(what string, got []int, ok int) {
		t.Helper()
		for i, code := range got {
			want := http.StatusOK
			if i >= ok {
				want = http.StatusTooManyRequests
			}
			if code != want {
				t.Errorf("%s: statuses %v, want %d of 200 then 429", what, got, ok)
				return
			}
		}
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	keyURL := fmt.Sprintf("http://127.0.0.1:%d/", keyPort)
	proxiedURL := fmt.Sprintf("http://127.0.0.1:%d/", proxiedPort)
	key := func(k string) http.Header { return http.Header{"X-Api-Key": {k}} }
	xff := func(addr string) http.Header { return http.Header{"X-Forwarded-For": {addr}} }
	a, other, proxy := from("127.0.0.1"), from("127.0.0.2"), from("127.0.0.3")
	expect("127.0.0.1 by address", statuses(a, url, nil, 8), 5)
	expect("127.0.0.2 by address", statuses(other, url, nil, 5), 5)
	expect("key-a", statuses(a, keyURL, key("key-a"), 6), 3)
	expect("key-b from the same address", statuses(a, keyURL, key("key-b"), 3), 3)
	expect("no key", statuses(a, keyURL, nil, 10), 10)
	// Two clients of one trusted proxy are limited apart; an untrusted
	// client's forged header changes nothing.
	expect("192.0.2.1 through the proxy", statuses(proxy, proxiedURL, xff("192.0.2.1"), 4), 2)
	expect("192.0.2.2 through the proxy", statuses(proxy, proxiedURL, xff("192.0.2.2"), 2), 2)
	expect("127.0.0.2 forging new addresses", []int{
		statuses(other, proxiedURL, xff("198.51.100.1"), 1)[0],
		statuses(other, proxiedURL, xff("198.51.100.2"), 1)[0],
		statuses(other, proxiedURL, xff("198.51.100.3"), 1)[0],
	}, 2)

	got, err := m.LimitedClients(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []LimitedClient{
		{Frontend: "shoal", Client: "127.0.0.1", Refused: 3, Rate: 8},
		// printf %s key-a | sha256sum: the key itself is never shown.
		{Frontend: "keys", Client: "sha256:" + sha256Hex("key-a")[:12], Refused: 3, Rate: 6},
		{Frontend: "proxied", Client: "192.0.2.1", Refused: 2, Rate: 4},
		{Frontend: "proxied", Client: "127.0.0.2", Refused: 1, Rate: 3},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("LimitedClients = %+v, want %+v", got, want)
	}
	// Not even HAProxy's own table holds the key.
	out, err := m.client.Exec(ctx, "show table keys")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "key-a") || strings.Contains(out, "key-b") {
		t.Errorf("the stick table holds API keys:\n%s", out)
	}
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// TestKeyDigest: a digest HAProxy keyed by is shortened; anything else (a
// table filled before keys were hashed) is hashed first, never shown.
func TestKeyDigest(t *testing.T) {
	full := strings.ToUpper(sha256Hex("secret-key"))
	if got := keyDigest(full); got != "sha256:"+sha256Hex("secret-key")[:12] {
		t.Errorf("keyDigest(digest) = %s", got)
	}
	if got := keyDigest("secret-key"); got != "sha256:"+sha256Hex("secret-key")[:12] {
		t.Errorf("keyDigest(raw) = %s", got)
	}
}
